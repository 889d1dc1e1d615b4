#pragma once
// Encoders and decoders of the activation wire formats (<polymoe/core/wire.hpp>): one row of H
// values <-> one record of wire_codec<W>::bytes(H) bytes (a multiple of 4, so records can follow
// each other with their fp32 fields aligned).
//
// Exactness. A quantized record holds the codes the scheme's quantizer gives the row and, per
// group, the group's amax a. decode() writes q·s (s = a / qmax, computed as the quantizer does) for
// every code below qmax and ±a for the codes at qmax, so the decoded group's amax is a again, its
// scale is s again, and each value divided by s lies within two fp32 roundings of its code:
// requantizing the decoded row gives the sender's codes and scales exactly
// (tests/unit/quant/test_wire.cpp checks it on rows of every magnitude).
// That needs products q·s in the normal fp32 range, so encode() declines (returns false) for a
// group whose amax is below 2^-100 but not zero, for a group holding a NaN or an infinity (which
// the quantizers leave as it is) and for an all-zero int8 row (its -0.0 would come back +0.0):
// such a row must travel as fp32.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include <polymoe/core/wire.hpp>
#include <polymoe/codecs/e4m3.hpp>
#include <polymoe/quantize/common.hpp>
#include <polymoe/quantize/fp8.hpp>
#include <polymoe/quantize/int8.hpp>

namespace polymoe::quantize {

template <class W>
struct wire_codec;

namespace detail {
/// Smallest nonzero amax a quantized record carries (2^-100): every q·s stays a normal float.
inline constexpr float wire_min_amax = 0x1p-100f;

[[nodiscard]] constexpr std::size_t round4(std::size_t n) noexcept { return (n + 3) & ~std::size_t{3}; }

/// The amax of n values, or -1 when they cannot travel quantized: non-finite, too small, or all
/// zero where the codes cannot keep the sign of a zero. One branch-free pass (vectorizes).
[[nodiscard]] inline float encodable_amax(const float* x, index_t n, bool signed_zero) noexcept {
  float m = 0.0f;
  int bad = 0;
  for (index_t i = 0; i < n; ++i) {
    const float v = std::fabs(x[i]);
    m = v > m ? v : m;
    bad |= !(v <= std::numeric_limits<float>::max());
  }
  if (bad) return -1.0f;
  return (m == 0.0f && signed_zero) || m >= wire_min_amax ? m : -1.0f;
}

/// Group-quantized records: [groups x fp32 amax][H codes][padding to 4 bytes]. `Codes` supplies
/// qmax, scale(a), encode(x, s) and value(code) for one element.
template <class Codes>
struct grouped_codec {
  static constexpr bool quantized = true;

  [[nodiscard]] static index_t groups(index_t H, index_t group) noexcept {
    return group == 0 || H == 0 ? 1 : (H + group - 1) / group;
  }
  [[nodiscard]] static std::size_t bytes(index_t H, index_t group) noexcept {
    return static_cast<std::size_t>(4 * groups(H, group)) + round4(static_cast<std::size_t>(H));
  }
  static bool encode(const float* x, index_t H, index_t group, std::byte* rec) noexcept {
    const index_t G = groups(H, group), len = group == 0 ? H : group;
    auto* codes = reinterpret_cast<std::uint8_t*>(rec + 4 * G);
    for (index_t g = 0; g < G; ++g) {
      const index_t g0 = g * len, n = std::min(len, H - g0);
      const float a = encodable_amax(x + g0, n, Codes::signed_zero);
      if (a < 0.0f) return false;
      std::memcpy(rec + 4 * g, &a, 4);
      Codes::encode(x + g0, n, Codes::scale(a), codes + g0);
    }
    std::memset(codes + H, 0, round4(static_cast<std::size_t>(H)) - static_cast<std::size_t>(H));
    return true;
  }
  static void decode(const std::byte* rec, index_t H, index_t group, float* x) noexcept {
    const index_t G = groups(H, group), len = group == 0 ? H : group;
    const auto* codes = reinterpret_cast<const std::uint8_t*>(rec + 4 * G);
    for (index_t g = 0; g < G; ++g) {
      float a;
      std::memcpy(&a, rec + 4 * g, 4);
      const float s = Codes::scale(a);
      const index_t g0 = g * len, n = std::min(len, H - g0);
      for (index_t i = 0; i < n; ++i) {
        const float v = Codes::value(codes[g0 + i]);
        x[g0 + i] = std::fabs(v) == Codes::qmax ? std::copysign(a, v) : v * s;
      }
    }
  }
};

/// The codes of the quantizers, written branch-free so that the loops vectorize; equal to
/// codecs::float_to_e4m3_sat(x / s) and round_to_int8(x / s) for every finite x (tested).
struct e4m3_codes {
  static constexpr float qmax = codecs::e4m3_max;
  static constexpr bool signed_zero = true;
  static float scale(float a) noexcept { return e4m3_scale(a); }
  static void encode(const float* x, index_t n, float s, std::uint8_t* q) noexcept {
    for (index_t i = 0; i < n; ++i) {
      const float y = x[i] / s;
      const std::uint32_t bits = std::bit_cast<std::uint32_t>(y), a = bits & 0x7FFFFFFFu;
      // normal results: rebias 127 -> 7, round the 20 dropped bits to nearest even
      const std::uint32_t normal = (a - (120u << 23) + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;
      // below 2^-6: adding 2^14 (ulp 2^-9) rounds |y| to a multiple of 2^-9, to nearest even; the
      // multiple (0..8) is the code, 8 being 2^-6, the first normal code
      const std::uint32_t sub = std::bit_cast<std::uint32_t>(std::fabs(y) + 16384.0f) - 0x46800000u;
      std::uint32_t c = a < 0x3C800000u ? sub : normal;
      c = c < 0x7Eu ? c : 0x7Eu;  // saturate at 448
      q[i] = static_cast<std::uint8_t>(((bits >> 24) & 0x80u) | c);
    }
  }
  static float value(std::uint8_t c) noexcept { return table()[c]; }

 private:
  static const std::array<float, 256>& table() noexcept {
    static constexpr std::array<float, 256> t = [] {
      std::array<float, 256> v{};
      for (unsigned c = 0; c < 256; ++c) v[c] = codecs::e4m3_to_float(static_cast<std::uint8_t>(c));
      return v;
    }();
    return t;
  }
};
struct int8_codes {
  static constexpr float qmax = 127.0f;
  static constexpr bool signed_zero = false;  // an all-zero row (-0.0 kept by the quantizer) goes as fp32
  static float scale(float a) noexcept { return int8_scale(a); }
  static void encode(const float* x, index_t n, float s, std::uint8_t* q) noexcept {
    for (index_t i = 0; i < n; ++i) {
      float y = x[i] / s;
      y = y < -128.0f ? -128.0f : (y > 127.0f ? 127.0f : y);
      y = (y + 12582912.0f) - 12582912.0f;  // 1.5 * 2^23: rounds to an integer, ties to even
      q[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(y));
    }
  }
  static float value(std::uint8_t c) noexcept { return static_cast<float>(static_cast<std::int8_t>(c)); }
};
}  // namespace detail

template <>
struct wire_codec<wire::fp32> {
  static constexpr bool quantized = false;
  [[nodiscard]] static std::size_t bytes(index_t H) noexcept { return 4 * static_cast<std::size_t>(H); }
  static bool encode(const float* x, index_t H, std::byte* rec) noexcept {
    std::memcpy(rec, x, bytes(H));
    return true;
  }
  static void decode(const std::byte* rec, index_t H, float* x) noexcept { std::memcpy(x, rec, bytes(H)); }
};

template <index_t Group>
struct wire_codec<wire::e4m3<Group>> {
  using impl = detail::grouped_codec<detail::e4m3_codes>;
  static constexpr bool quantized = true;
  [[nodiscard]] static std::size_t bytes(index_t H) noexcept { return impl::bytes(H, Group); }
  static bool encode(const float* x, index_t H, std::byte* rec) noexcept { return impl::encode(x, H, Group, rec); }
  static void decode(const std::byte* rec, index_t H, float* x) noexcept { impl::decode(rec, H, Group, x); }
};

template <>
struct wire_codec<wire::int8_rows> {
  using impl = detail::grouped_codec<detail::int8_codes>;
  static constexpr bool quantized = true;
  [[nodiscard]] static std::size_t bytes(index_t H) noexcept { return impl::bytes(H, 0); }
  static bool encode(const float* x, index_t H, std::byte* rec) noexcept { return impl::encode(x, H, 0, rec); }
  static void decode(const std::byte* rec, index_t H, float* x) noexcept { impl::decode(rec, H, 0, x); }
};

}  // namespace polymoe::quantize
