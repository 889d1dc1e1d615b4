// Scalar codecs against torch's own tables (fixtures/hf/dtype_tables.safetensors) and against
// brute-force nearest-value searches written here, independently of the codecs.
#include "fixtures_root.hpp"
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <polymoe/io/safetensors.hpp>
#include <polymoe/codecs/codecs.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace c = polymoe::codecs;
using polymoe::io::safetensors_file;

// Compile-time: the codecs are usable in constant expressions.
static_assert(c::float_to_bf16(1.0f) == 0x3F80);
static_assert(c::bf16_to_float(0x4040) == 3.0f);
static_assert(c::float_to_fp16(1.0f) == 0x3C00);
static_assert(c::fp16_to_float(0x7BFF) == 65504.0f);
static_assert(c::float_to_e4m3(448.0f) == 0x7E && c::float_to_e4m3(-464.0f) == 0xFE);
static_assert(c::float_to_e4m3(500.0f) == 0x7F && c::float_to_e4m3_sat(500.0f) == 0x7E);
static_assert(c::e4m3_to_float(0x01) == 0x1p-9f);
static_assert(c::float_to_e5m2(57344.0f) == 0x7B && c::float_to_e5m2(61440.0f) == 0x7C);
static_assert(c::e8m0_to_float(127) == 1.0f && c::mxfp4_scale_code(6.0f) == 127);
static_assert(c::float_to_e2m1(-6.5f) == 0xF && c::e2m1_to_float(0x9) == -0.5f);

std::string hex(std::uint32_t v, int digits = 8) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*X", digits, v);
  return buf;
}
std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }
float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }

const safetensors_file& tables() {
  static const safetensors_file f =
      safetensors_file::open(polymoe::test::fixtures_root() / "hf" / "dtype_tables.safetensors");
  return f;
}

// Collects mismatches and reports the first few with context.
struct mismatches {
  std::size_t count = 0;
  std::ostringstream first;
  void add(const std::string& line) {
    if (count++ < 10) first << "  " << line << "\n";
  }
  void check(const char* what) const {
    EXPECT_EQ(count, 0u) << what << ": " << count << " mismatches; first ones:\n" << first.str();
  }
};

template <class Decode>
void check_decode_table(const char* table, Decode decode) {
  const auto expected = tables().to_f32(table);
  ASSERT_EQ(expected.size(), 256u) << table;
  mismatches m;
  for (unsigned code = 0; code < 256; ++code) {
    const float want = expected[code];
    const float got = decode(static_cast<std::uint8_t>(code));
    const bool ok = std::isnan(want) ? std::isnan(got) : bits(want) == bits(got);
    if (!ok)
      m.add("code " + hex(code, 2) + ": expected " + hex(bits(want)) + ", got " + hex(bits(got)));
  }
  m.check(table);
}

TEST(codecs_fp8, e4m3_decode_matches_torch_for_every_code) {
  check_decode_table("float8_e4m3fn_decode", c::e4m3_to_float);
}
TEST(codecs_fp8, e5m2_decode_matches_torch_for_every_code) {
  check_decode_table("float8_e5m2_decode", c::e5m2_to_float);
}
TEST(codecs_e8m0, decode_matches_torch_for_every_code) {
  check_decode_table("float8_e8m0fnu_decode", c::e8m0_to_float);
}

TEST(codecs_fp8, fp8_decode_nan_bits_match_torch) {  // stronger than "both NaN": same bits
  const auto e4 = tables().to_f32("float8_e4m3fn_decode");
  const auto e5 = tables().to_f32("float8_e5m2_decode");
  for (unsigned code = 0; code < 256; ++code) {
    EXPECT_EQ(bits(e4[code]), bits(c::e4m3_to_float(static_cast<std::uint8_t>(code)))) << code;
    EXPECT_EQ(bits(e5[code]), bits(c::e5m2_to_float(static_cast<std::uint8_t>(code)))) << code;
  }
}

template <class Encode>
void check_cast(const char* code_table, Encode encode) {
  const auto input = tables().to_f32("e4m3_cast_input");
  const auto expected = tables().u8(code_table);
  ASSERT_EQ(input.size(), expected.size());
  ASSERT_GT(input.size(), 1000u);
  mismatches m;
  for (std::size_t i = 0; i < input.size(); ++i) {
    const std::uint8_t got = encode(input[i]);
    if (got != expected[i])
      m.add("index " + std::to_string(i) + ": input " + hex(bits(input[i])) + " (" +
            std::to_string(input[i]) + "): expected " + hex(expected[i], 2) + ", got " +
            hex(got, 2));
  }
  m.check(code_table);
}

TEST(codecs_fp8, e4m3_cast_matches_torch) { check_cast("e4m3_cast_code", c::float_to_e4m3); }
TEST(codecs_fp8, e5m2_cast_matches_torch) { check_cast("e5m2_cast_code", c::float_to_e5m2); }

TEST(codecs_bf16, cast_matches_torch) {
  const auto input = tables().to_f32("bf16_cast_input");
  const auto expected = tables().i16("bf16_cast_bits");
  ASSERT_EQ(input.size(), expected.size());
  mismatches m;
  std::size_t nan_inputs = 0;
  for (std::size_t i = 0; i < input.size(); ++i) {
    const auto want = static_cast<std::uint16_t>(expected[i]);
    const std::uint16_t got = c::float_to_bf16(input[i]);
    bool ok = want == got;
    if (std::isnan(input[i])) {  // torch writes 0xFFFF for every NaN; we keep sign and payload
      ++nan_inputs;
      ok = std::isnan(c::bf16_to_float(want)) && std::isnan(c::bf16_to_float(got));
    }
    if (!ok)
      m.add("index " + std::to_string(i) + ": input " + hex(bits(input[i])) + ": expected " +
            hex(want, 4) + ", got " + hex(got, 4));
  }
  m.check("bf16_cast_bits");
  EXPECT_GE(nan_inputs, 1u);
}

TEST(codecs_bf16, nan_stays_quiet_nan_with_sign) {
  for (const std::uint32_t b : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu}) {
    const std::uint16_t h = c::float_to_bf16(from_bits(b));
    EXPECT_TRUE(std::isnan(c::bf16_to_float(h))) << hex(b);
    EXPECT_EQ(h & 0x8000u, (b >> 16) & 0x8000u) << hex(b);
    EXPECT_TRUE(h & 0x0040u) << hex(b);
  }
  EXPECT_EQ(c::float_to_bf16(from_bits(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX rounds to inf (RNE)
  EXPECT_EQ(c::float_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
}

TEST(codecs_bf16, every_bf16_round_trips) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = c::bf16_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(c::float_to_bf16(f), h) << hex(h, 4);
  }
}

// ---- fp16
// ----------------------------------------------------------------------------------------

TEST(codecs_fp16, every_half_round_trips) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = c::fp16_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(c::fp16_to_float(c::float_to_fp16(f)))) << hex(h, 4);
      continue;
    }
    ASSERT_EQ(c::float_to_fp16(f), h) << hex(h, 4);
  }
}

TEST(codecs_fp16, decode_values) {
  EXPECT_EQ(c::fp16_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(c::fp16_to_float(0x03FF), 1023 * 0x1p-24f);
  EXPECT_EQ(c::fp16_to_float(0x0200), 0x1p-15f);
  EXPECT_EQ(c::fp16_to_float(0x0400), 0x1p-14f);
  EXPECT_EQ(c::fp16_to_float(0x8001), -0x1p-24f);
  EXPECT_EQ(c::fp16_to_float(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isinf(c::fp16_to_float(0xFC00)));
}

#if defined(__FLT16_MAX__)
// Independent reference: the compiler's own _Float16 conversion (round to nearest even).
TEST(codecs_fp16, encode_matches_compiler_float16_on_a_sweep) {
  mismatches m;
  for (std::uint64_t b = 0; b <= 0xFFFFFFFFull; b += 9973) {
    const float f = from_bits(static_cast<std::uint32_t>(b));
    if (std::isnan(f)) continue;
    const auto ref = std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
    const std::uint16_t got = c::float_to_fp16(f);
    if (ref != got)
      m.add("input " + hex(bits(f)) + ": expected " + hex(ref, 4) + ", got " + hex(got, 4));
  }
  // exact midpoints between neighbouring halves, and their neighbours
  for (std::uint32_t h = 0; h < 0x7C00; ++h) {
    const double lo = c::fp16_to_float(static_cast<std::uint16_t>(h));
    const double hi = h == 0x7BFF ? 65536.0 : c::fp16_to_float(static_cast<std::uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);
    for (const float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f), -mid}) {
      const auto ref = std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
      const std::uint16_t got = c::float_to_fp16(f);
      if (ref != got)
        m.add("input " + hex(bits(f)) + ": expected " + hex(ref, 4) + ", got " + hex(got, 4));
    }
  }
  m.check("float_to_fp16 vs _Float16");
}
#endif

// ---- fp8: brute force --------------------------------------------------------------------------

// Nearest code by exhaustive search over the finite non-negative codes plus the first code past the
// largest finite value (torch rounds as if the grid went on: 480 for E4M3 is the NaN code 0x7F,
// 65536 for E5M2 is inf 0x7C); ties go to the even code.
struct grid {
  std::vector<double> value;  // value[code] for codes 0..top
  std::uint8_t top;           // the first code past the finite range
};
grid make_grid(float (*decode)(std::uint8_t), std::uint8_t last_finite, double past_value) {
  grid g;
  g.top = static_cast<std::uint8_t>(last_finite + 1);
  for (unsigned code = 0; code <= last_finite; ++code)
    g.value.push_back(decode(static_cast<std::uint8_t>(code)));
  g.value.push_back(past_value);
  return g;
}
std::uint8_t brute_encode(const grid& g, float x, std::uint8_t overflow_code) {
  const double a = std::fabs(static_cast<double>(x));
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (a >= g.value.back()) return sign | overflow_code;
  std::size_t best = 0;
  for (std::size_t code = 1; code < g.value.size(); ++code) {
    const double d = std::fabs(a - g.value[code]);
    const double bd = std::fabs(a - g.value[best]);
    if (d < bd || (d == bd && (code % 2 == 0) && (best % 2 == 1))) best = code;
  }
  return static_cast<std::uint8_t>(sign | best);
}

template <class Encode>
void sweep_fp8(const grid& g, std::uint8_t overflow_code, Encode encode, const char* what) {
  mismatches m;
  const auto check = [&](float x) {
    const std::uint8_t want = brute_encode(g, x, overflow_code);
    const std::uint8_t got = encode(x);
    if (want != got)
      m.add("input " + hex(bits(x)) + " (" + std::to_string(x) + "): expected " + hex(want, 2) +
            ", got " + hex(got, 2));
  };
  for (std::uint32_t b = 0; b < 0x7F800000u; b += 4093) {
    check(from_bits(b));
    check(from_bits(b | 0x80000000u));
  }
  for (std::size_t code = 0; code + 1 < g.value.size(); ++code) {
    const float mid = static_cast<float>((g.value[code] + g.value[code + 1]) / 2);
    for (const float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f),
                          static_cast<float>(g.value[code])}) {
      check(f);
      check(-f);
    }
  }
  check(std::numeric_limits<float>::infinity());
  check(-std::numeric_limits<float>::infinity());
  check(std::numeric_limits<float>::denorm_min());
  check(std::numeric_limits<float>::max());
  m.check(what);
}

TEST(codecs_fp8, e4m3_encode_matches_brute_force) {
  const grid g = make_grid(c::e4m3_to_float, 0x7E, 480.0);
  sweep_fp8(g, 0x7F, c::float_to_e4m3, "float_to_e4m3");
}
TEST(codecs_fp8, e5m2_encode_matches_brute_force) {
  const grid g = make_grid(c::e5m2_to_float, 0x7B, 65536.0);
  sweep_fp8(g, 0x7C, c::float_to_e5m2, "float_to_e5m2");
}

TEST(codecs_fp8, e4m3_saturating_cast) {
  const auto input = tables().to_f32("e4m3_cast_input");
  const auto torch = tables().u8("e4m3_cast_code");
  for (std::size_t i = 0; i < input.size(); ++i) {
    const float x = input[i];
    const float clamped = std::fmin(std::fmax(x, -448.0f), 448.0f);
    ASSERT_EQ(c::float_to_e4m3_sat(x), c::float_to_e4m3(clamped)) << hex(bits(x));
    if (std::fabs(x) <= 448.0f) {
      ASSERT_EQ(c::float_to_e4m3_sat(x), torch[i]) << hex(bits(x));
    }
  }
  EXPECT_EQ(c::float_to_e4m3_sat(1e6f), 0x7E);
  EXPECT_EQ(c::float_to_e4m3_sat(-1e6f), 0xFE);
  EXPECT_EQ(c::float_to_e4m3_sat(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(c::float_to_e4m3_sat(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(c::float_to_e4m3_sat(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(c::float_to_e4m3_sat(-std::numeric_limits<float>::quiet_NaN()), 0xFF);
  EXPECT_EQ(c::float_to_e4m3_sat(465.0f), 0x7E);
}

TEST(codecs_fp8, every_code_round_trips) {
  for (unsigned code = 0; code < 256; ++code) {
    const auto k = static_cast<std::uint8_t>(code);
    const float f4 = c::e4m3_to_float(k);
    EXPECT_EQ(c::float_to_e4m3(f4), k) << hex(code, 2);  // NaN codes too (sign kept)
    const float f5 = c::e5m2_to_float(k);
    if (std::isnan(f5)) {
      EXPECT_EQ(c::float_to_e5m2(f5), (code & 0x80u) | 0x7Fu) << hex(code, 2);
    } else {
      EXPECT_EQ(c::float_to_e5m2(f5), k) << hex(code, 2);
    }
  }
}

// ---- E2M1 --------------------------------------------------------------------------------------

TEST(codecs_e2m1, all_codes_decode) {
  const float expected[16] = {0,     0.5f,  1,  1.5f,  2,  3,  4,  6,
                              -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (unsigned code = 0; code < 16; ++code) {
    EXPECT_EQ(bits(c::e2m1_to_float(static_cast<std::uint8_t>(code))), bits(expected[code]))
        << code;
    EXPECT_EQ(bits(c::e2m1_to_float(static_cast<std::uint8_t>(code | 0xF0))), bits(expected[code]))
        << "high nibble must be ignored, code " << code;
  }
}

// Independent reference: nearest of the 8 magnitudes after saturating at 6, ties to the even code,
// zero written +0, NaN -> +0.
std::uint8_t e2m1_reference(float x) {
  if (std::isnan(x)) return 0;
  const double values[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const double a = std::fmin(std::fabs(static_cast<double>(x)), 6.0);
  unsigned best = 0;
  for (unsigned code = 1; code < 8; ++code) {
    const double d = std::fabs(a - values[code]), bd = std::fabs(a - values[best]);
    if (d < bd || (d == bd && code % 2 == 0)) best = code;
  }
  if (best == 0) return 0;
  return static_cast<std::uint8_t>((std::signbit(x) ? 8u : 0u) | best);
}

TEST(codecs_e2m1, encode_matches_brute_force) {
  mismatches m;
  const auto check = [&](float x) {
    const std::uint8_t want = e2m1_reference(x), got = c::float_to_e2m1(x);
    if (want != got)
      m.add("input " + hex(bits(x)) + " (" + std::to_string(x) + "): expected " + hex(want, 1) +
            ", got " + hex(got, 1));
  };
  for (int i = -10 * 4096; i <= 10 * 4096; ++i) check(static_cast<float>(i) / 4096.0f);
  const float values[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int k = 0; k < 7; ++k) {
    const float mid = (values[k] + values[k + 1]) / 2;
    for (const float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 100.0f)}) {
      check(f);
      check(-f);
    }
  }
  for (std::uint32_t b = 0; b < 0x7F800000u; b += 65521) {
    check(from_bits(b));
    check(from_bits(b | 0x80000000u));
  }
  check(std::numeric_limits<float>::infinity());
  check(-std::numeric_limits<float>::infinity());
  m.check("float_to_e2m1");
}

TEST(codecs_e2m1, ties_saturation_zero_and_nan) {
  EXPECT_EQ(c::float_to_e2m1(0.25f), 0x0);  // tie 0 / 0.5 -> even code 0
  EXPECT_EQ(c::float_to_e2m1(0.75f), 0x2);  // tie 0.5 / 1 -> code 2 (1.0)
  EXPECT_EQ(c::float_to_e2m1(1.25f), 0x2);  // tie 1 / 1.5 -> code 2
  EXPECT_EQ(c::float_to_e2m1(1.75f), 0x4);  // tie 1.5 / 2 -> code 4
  EXPECT_EQ(c::float_to_e2m1(2.5f), 0x4);   // tie 2 / 3 -> code 4
  EXPECT_EQ(c::float_to_e2m1(3.5f), 0x6);   // tie 3 / 4 -> code 6
  EXPECT_EQ(c::float_to_e2m1(5.0f), 0x6);   // tie 4 / 6 -> code 6
  EXPECT_EQ(c::float_to_e2m1(-5.0f), 0xE);
  EXPECT_EQ(c::float_to_e2m1(7.9f), 0x7);
  EXPECT_EQ(c::float_to_e2m1(-1e30f), 0xF);
  EXPECT_EQ(c::float_to_e2m1(-0.0f), 0x0);  // -0 written as +0
  EXPECT_EQ(c::float_to_e2m1(-0.2f), 0x0);  // rounds to zero: +0
  EXPECT_EQ(c::float_to_e2m1(std::numeric_limits<float>::quiet_NaN()), 0x0);
  EXPECT_EQ(c::float_to_e2m1(-std::numeric_limits<float>::quiet_NaN()), 0x0);
}

TEST(codecs_e2m1, pack_puts_element_2i_in_the_low_nibble) {
  const float in[5] = {0.5f, -1.0f, 6.0f, 2.0f, 3.0f};
  std::uint8_t packed[3] = {0xAA, 0xAA, 0xAA};
  c::pack_e2m1(in, 5, packed);
  EXPECT_EQ(packed[0], 0xA1);  // low: 0.5 (1), high: -1 (0xA)
  EXPECT_EQ(packed[1], 0x47);  // low: 6 (7), high: 2 (4)
  EXPECT_EQ(packed[2], 0x05);  // low: 3 (5), high: 0 (odd count)
  float out[5] = {};
  c::unpack_e2m1(packed, 5, out);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], in[i]) << i;

  std::vector<std::uint8_t> all(128);
  for (unsigned b = 0; b < 256; ++b) {  // every byte unpacks to (low, high) and packs back
    const std::uint8_t byte = static_cast<std::uint8_t>(b);
    float two[2];
    c::unpack_e2m1(&byte, 2, two);
    EXPECT_EQ(bits(two[0]), bits(c::e2m1_to_float(byte & 0xF)));
    EXPECT_EQ(bits(two[1]), bits(c::e2m1_to_float(byte >> 4)));
    std::uint8_t again = 0;
    c::pack_e2m1(two, 2, &again);
    const auto canon = [](unsigned n) { return n == 8 ? 0u : n; };  // -0 packs as +0
    EXPECT_EQ(again, canon(b & 0xF) | (canon(b >> 4) << 4)) << b;
  }
}

// ---- E8M0 scale
// ----------------------------------------------------------------------------------

TEST(codecs_e8m0, mx_scale_code_edge_cases) {
  EXPECT_EQ(c::mxfp4_scale_code(0.0f), 0);  // all-zero block: the smallest scale
  EXPECT_EQ(c::mxfp4_scale_code(-0.0f), 0);
  EXPECT_EQ(c::mxfp4_scale_code(std::numeric_limits<float>::denorm_min()), 0);  // 2^-149 -> clamp
  EXPECT_EQ(c::mxfp4_scale_code(0x1p-126f), 0);  // -126 - 2 + 127 = -1 -> clamp 0
  EXPECT_EQ(c::mxfp4_scale_code(0x1p-125f), 0);
  EXPECT_EQ(c::mxfp4_scale_code(0x1p-124f), 1);
  EXPECT_EQ(c::mxfp4_scale_code(6.0f), 127);  // floor(log2 6) = 2 -> 2^0
  EXPECT_EQ(c::mxfp4_scale_code(4.0f), 127);
  EXPECT_EQ(c::mxfp4_scale_code(7.9f), 127);  // 7.9 / 1 saturates to 6 (the spec's choice)
  EXPECT_EQ(c::mxfp4_scale_code(8.0f), 128);
  EXPECT_EQ(c::mxfp4_scale_code(-8.0f), 128);  // sign ignored
  EXPECT_EQ(c::mxfp4_scale_code(1.0f), 125);
  EXPECT_EQ(c::mxfp4_scale_code(std::numeric_limits<float>::max()), 252);
  EXPECT_EQ(c::mxfp4_scale_code(std::numeric_limits<float>::infinity()), 0xFF);
  EXPECT_EQ(c::mxfp4_scale_code(std::numeric_limits<float>::quiet_NaN()), 0xFF);
  EXPECT_EQ(c::e8m0_mx_scale_code(448.0f, 8), 127);     // MXFP8 E4M3: emax 8
  EXPECT_EQ(c::e8m0_mx_scale_code(0x1p127f, -2), 254);  // clamped at the top
  // property: amax / scale lies in [4, 8) wherever the scale is not clamped
  for (std::uint32_t b = 0x00800000u; b < 0x7F800000u; b += 7919) {
    const float amax = from_bits(b);
    const std::uint8_t code = c::mxfp4_scale_code(amax);
    if (code == 0 || code == 254) continue;
    const double r = static_cast<double>(amax) / c::e8m0_to_float(code);
    ASSERT_GE(r, 4.0) << hex(b);
    ASSERT_LT(r, 8.0) << hex(b);
  }
}

TEST(codecs_e8m0, floor_log2) {
  EXPECT_EQ(c::floor_log2(1.0f), 0);
  EXPECT_EQ(c::floor_log2(7.99f), 2);
  EXPECT_EQ(c::floor_log2(0.5f), -1);
  EXPECT_EQ(c::floor_log2(std::numeric_limits<float>::denorm_min()), -149);
  EXPECT_EQ(c::floor_log2(from_bits(0x00400000u)), -127);
  EXPECT_EQ(c::floor_log2(from_bits(0x007FFFFFu)), -127);
  EXPECT_EQ(c::floor_log2(-3.0f), 1);
}

}  // namespace
