// The tiled kernels' vectorized activation quantizers (kernels/tiled/act_quant.hpp) against the
// scalar codecs and quantizers of polymoe/quantize, bit for bit: E2M1 and E4M3 rounding, E4M3 rows
// (the fp8 schemes' inputs), and NVFP4 W4A4 rows as fp32 values (kernel::tiled) and as e2m1 · e4m3
// values with the row's scale_2 (the AMX tiles).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include <polymoe/codecs/bf16.hpp>
#include <polymoe/codecs/e2m1.hpp>
#include <polymoe/codecs/e4m3.hpp>
#include <polymoe/quantize/nvfp4.hpp>
#include <polymoe/quant/fp8.hpp>
#include <polymoe/quant/fp8_block.hpp>
#include <polymoe/kernels/tiled/act_quant.hpp>

using namespace polymoe;

namespace {

namespace kt = kernels::tiled;

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

/// Rows that reach every branch of the NVFP4 quantizer: lengths with and without a partial last
/// block; Gaussian rows; rows whose blocks span 2^-40 .. 2^8 (E4M3 block scales subnormal or
/// rounded to zero); a row with scale_2 = 1 and blocks of amax 6 (block scale 1), so the values
/// land on E2M1's ties and saturation exactly; a row of subnormal floats; a zero row; rows with an
/// infinity or a NaN.
std::vector<std::vector<float>> nvfp4_rows() {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd;
  std::vector<std::vector<float>> rows;
  for (const int n : {1, 7, 16, 17, 33, 300}) {
    std::vector<float> r(static_cast<std::size_t>(n));
    for (auto& v : r) v = nd(rng);
    rows.push_back(r);
    for (std::size_t i = 0; i < r.size(); ++i)
      r[i] = nd(rng) * std::exp2(static_cast<float>(static_cast<int>((i / 16 * 7 + rng() % 5) % 49) - 40));
    rows.push_back(r);
  }
  std::vector<float> ties = {2688.0f, 6.0f,  0.25f, 0.75f, 1.25f, 1.75f, 2.5f,  3.5f,   5.0f,  -5.0f, -0.25f,
                             -0.1f,   6.5f, 0.74f, 5.01f, 4.99f, -2.5f, 0.0f,  -1.75f, 3.49f, 0.26f, 1.24f};
  ties.resize(48, 0.0f);
  ties[32] = 6.0f;  // the third block: amax 6 again, the ties once more, negated
  for (std::size_t i = 2; i < 16; ++i) ties[32 + i] = -ties[i];
  rows.push_back(ties);
  rows.push_back(std::vector<float>(40, 3e-39f));
  rows.push_back(std::vector<float>(40, 0.0f));
  std::vector<float> odd(40, 1.5f);
  odd[21] = std::numeric_limits<float>::infinity();
  rows.push_back(odd);
  odd[21] = std::numeric_limits<float>::quiet_NaN();
  rows.push_back(odd);
  return rows;
}

TEST(ActQuant, Nvfp4RowsAreTheSchemesBitForBit) {
  // fake_quantize_nvfp4_row (what kernel::tiled runs for quant::nvfp4_w4a4) against
  // quantize::fake_quantize_nvfp4 (quant::nvfp4_w4a4::quantize_activation).
  for (const std::vector<float>& row : nvfp4_rows()) {
    std::vector<float> want = row, got = row;
    polymoe::quantize::fake_quantize_nvfp4(want);
    kt::fake_quantize_nvfp4_row(got);
    for (std::size_t i = 0; i < row.size(); ++i)
      ASSERT_EQ(bits(got[i]), bits(want[i])) << "n=" << row.size() << " i=" << i << " x=" << row[i] << " got "
                                             << got[i] << " want " << want[i];
  }
}

/// Rows that reach every branch of the E4M3 row quantizer, for groups of 128 and of a whole row:
/// lengths with and without a partial last vector and group; Gaussian rows; rows whose groups span
/// 2^-140 .. 2^120 (subnormal values and scales, x / s near 448 and saturating); a group with an
/// infinity, one with a NaN and one of zeros (of both signs) between ordinary groups; one value far
/// above the rest of its group.
std::vector<std::vector<float>> e4m3_rows() {
  std::mt19937 rng(23);
  std::normal_distribution<float> nd;
  std::vector<std::vector<float>> rows;
  for (const int n : {1, 7, 16, 17, 127, 128, 129, 300, 2048}) {
    std::vector<float> r(static_cast<std::size_t>(n));
    for (auto& v : r) v = nd(rng);
    rows.push_back(r);
    for (std::size_t i = 0; i < r.size(); ++i)
      r[i] = nd(rng) * std::exp2(static_cast<float>(static_cast<int>((i / 128 * 37 + rng() % 9) % 261) - 140));
    rows.push_back(r);
  }
  std::vector<float> r(5 * 128 + 40);
  for (auto& v : r) v = nd(rng);
  r[130] = std::numeric_limits<float>::infinity();
  r[300] = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t i = 384; i < 512; ++i) r[i] = i % 2 ? -0.0f : 0.0f;
  r[520] = 1e4f;  // the rest of its group rounds to the smallest E4M3 steps, or to zero
  rows.push_back(r);
  return rows;
}

TEST(ActQuant, E4m3RowsAreTheSchemesBitForBit) {
  // e4m3_inputs (what kernel::tiled runs for quant::fp8 and quant::fp8_block) against the schemes'
  // quantize_activation (quantize::fake_quantize_e4m3, one value at a time).
  const auto check = [](const std::vector<float>& row, auto act, auto scheme, const char* name) {
    std::vector<float> want = row, got = row;
    scheme(std::span<float>(want));
    act(std::span<float>(got));
    for (std::size_t i = 0; i < row.size(); ++i)
      ASSERT_EQ(bits(got[i]), bits(want[i])) << name << " n=" << row.size() << " i=" << i << " x=" << row[i]
                                             << " got " << got[i] << " want " << want[i];
  };
  for (const std::vector<float>& row : e4m3_rows()) {
    check(row, kt::e4m3_inputs<0>::row, quant::fp8::quantize_activation, "fp8");
    check(row, kt::e4m3_inputs<quant::fp8_block::block>::row, quant::fp8_block::quantize_activation, "fp8_block");
  }
}

#if POLYMOE_TILED_AVX512

/// The values v and their negations through a vector rounding (sixteen at a time) and through the
/// scalar codec's encode then decode, bit for bit (the sign of zero included).
template <class Vec, class Ref>
void expect_rounding_is_the_codecs(std::vector<float> v, Vec vec, Ref ref) {
  const std::size_t n = v.size();
  for (std::size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  while (v.size() % 16) v.push_back(0.0f);
  for (std::size_t i = 0; i < v.size(); i += 16) {
    alignas(64) float got[16];
    _mm512_store_ps(got, vec(_mm512_loadu_ps(v.data() + i)));
    for (std::size_t j = 0; j < 16; ++j) {
      const float want = ref(v[i + j]);
      ASSERT_EQ(bits(got[j]), bits(want)) << "x=" << v[i + j] << " got " << got[j] << " want " << want;
    }
  }
}

/// Every float from `from` to `to` (positive) in steps of `ulps`; each value of `values` (ascending) and
/// each midpoint between neighbours, with their two float neighbours; then `extra`.
std::vector<float> rounding_cases(float from, float to, std::uint32_t ulps, const std::vector<float>& values,
                                  std::initializer_list<float> extra) {
  std::vector<float> v;
  for (std::uint32_t b = bits(from); b <= bits(to); b += ulps) v.push_back(std::bit_cast<float>(b));
  for (std::size_t c = 0; c + 1 < values.size(); ++c)
    for (const float x : {values[c], 0.5f * (values[c] + values[c + 1])})
      for (const float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, 1e9f)}) v.push_back(y);
  v.insert(v.end(), extra);
  return v;
}

TEST(ActQuant, E2m1RoundingIsTheCodecs) {
  // simd::round_e2m1 against codecs::float_to_e2m1 then e2m1_to_float (zero as +0): floats from 2^-4
  // to 2^4 in steps of 97 ulps, the E2M1 values and midpoints, the extremes.
  const std::vector<float> values(std::begin(codecs::e2m1_values), std::end(codecs::e2m1_values));
  expect_rounding_is_the_codecs(
      rounding_cases(0x1p-4f, 0x1p4f, 97, values, {6.0f, 7.0f, 1e30f, 1e-30f, 1e-40f, 0.25f, 0.2499f}),
      [](__m512 x) { return kt::simd::round_e2m1(x); },
      [](float x) { return codecs::e2m1_to_float(codecs::float_to_e2m1(x)); });
}

TEST(ActQuant, E4m3RoundingIsTheCodecs) {
  // simd::round_e4m3 against codecs::float_to_e4m3_sat then e4m3_to_float: floats from 2^-12 to
  // 2^10 in steps of 61 ulps, the E4M3 values and midpoints, saturation and the subnormal edge.
  std::vector<float> values;
  for (int c = 0; c <= 0x7E; ++c) values.push_back(codecs::e4m3_to_float(static_cast<std::uint8_t>(c)));
  expect_rounding_is_the_codecs(
      rounding_cases(0x1p-12f, 0x1p10f, 61, values,
                     {0.0f, 448.0f, 464.0f, 479.9f, 480.0f, 1e30f, 1e-30f, 1e-40f, 0x1p-10f, 0x1p-11f}),
      [](__m512 x) { return kt::simd::round_e4m3(x); },
      [](float x) { return codecs::e4m3_to_float(codecs::float_to_e4m3_sat(x)); });
}

TEST(ActQuant, Nvfp4TileRowsAreTheSchemesValues) {
  // quantize_nvfp4_tile_row (what the AMX tiles take for quant::nvfp4_w4a4) against
  // quantize::fake_quantize_nvfp4 of x · wt: each element's bf16 value is an exact e2m1 · e4m3
  // product and, times the returned scale, the scheme's fp32 value bit for bit; a zero row is zeros
  // with scale 1, a row with an infinity or a NaN bf16(x · wt) with scale 1; zeros from n to n32.
  for (const std::vector<float>& row : nvfp4_rows()) {
    for (const float wt : {1.0f, 0.37f}) {
      const auto n = static_cast<index_t>(row.size()), n32 = (n + 31) / 32 * 32;
      std::vector<float> want(row.size());
      for (std::size_t i = 0; i < row.size(); ++i) want[i] = row[i] * wt;
      const bool finite = std::all_of(want.begin(), want.end(), [](float x) { return std::isfinite(x); });
      polymoe::quantize::fake_quantize_nvfp4(want);
      std::vector<std::uint16_t> dst(static_cast<std::size_t>(n32), 0xFFFF);
      const float s = kt::quantize_nvfp4_tile_row(row.data(), wt, n, n32, dst.data());
      if (!finite || std::all_of(row.begin(), row.end(), [](float x) { return x == 0.0f; })) {
        EXPECT_EQ(s, 1.0f);
      }
      for (index_t i = 0; i < n32; ++i) {
        const auto u = static_cast<std::size_t>(i);
        if (i >= n) {
          ASSERT_EQ(dst[u], 0) << i;
          continue;
        }
        const float q = codecs::bf16_to_float(dst[u]);
        if (!finite) {
          ASSERT_EQ(dst[u], codecs::float_to_bf16(row[u] * wt)) << i;
          continue;
        }
        ASSERT_EQ(bits(q * s), bits(want[u]))
            << "n=" << n << " wt=" << wt << " i=" << i << " x=" << row[u] << " q=" << q << " s=" << s;
      }
    }
  }
}

#else

TEST(ActQuant, VectorQuantizersOfThisBuild) {
  GTEST_SKIP() << "the compiler does not target AVX-512F here: kernel::tiled runs the scheme's scalar quantizer, "
                  "and the vector quantizers are not compiled";
}

#endif

}  // namespace
