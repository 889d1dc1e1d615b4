#pragma once
// Symmetric int4 weights in groups of 32 along k (quant::int4_w4a8). One row of K values is
// ceil(K/32) groups; each group is 16 bytes of packed codes and one fp32 scale.
//
// Arithmetic, exactly: scale s = amax(group) / 7 in fp32 (1 when amax is 0); code =
// clamp(round_half_even(x / s), -8, 7) with fp32 division (|x / s| <= 7 up to the division's
// rounding, so a quantizer writes -7..7; -8 is a valid stored code); value = code · s.
// Packing: a code is a two's-complement nibble (code & 0xF); element 2i of a group in the low
// nibble of byte i, element 2i + 1 in the high nibble. A partial last group (K not a multiple of
// 32) is padded with code 0.
#include <algorithm>
#include <cstdint>

#include <polymoe/quantize/common.hpp>
#include <polymoe/quantize/int8.hpp>

namespace polymoe::quantize {

inline constexpr index_t int4_group = 32;        ///< elements per int4 group (one scale each)
inline constexpr index_t int4_group_bytes = 16;  ///< packed bytes per group

/// The int4 scale for values whose largest magnitude is `a`.
[[nodiscard]] inline float int4_scale(float a) noexcept { return a > 0.0f ? a / 7.0f : 1.0f; }

/// Round to nearest, ties to even, saturating to [-8, 7]; NaN -> 0 (int8's rounding, narrowed:
/// clamping an integer after rounding is the same as rounding the clamped value).
[[nodiscard]] inline std::int8_t round_to_int4(float v) noexcept {
  return static_cast<std::int8_t>(std::clamp<int>(round_to_int8(v), -8, 7));
}

/// The code a nibble (its low four bits) stands for: two's complement, -8..7.
[[nodiscard]] constexpr std::int8_t int4_from_nibble(std::uint8_t n) noexcept {
  return static_cast<std::int8_t>(((n & 0xF) ^ 8) - 8);
}

/// Code of element k of a packed row (element 2i in the low nibble of byte i).
[[nodiscard]] inline std::int8_t int4_code(const std::uint8_t* row, index_t k) noexcept {
  const std::uint8_t byte = row[k / 2];
  return int4_from_nibble(static_cast<std::uint8_t>(k % 2 ? byte >> 4 : byte));
}

/// Quantizes a row of K finite values into ceil(K/32)·16 packed bytes and ceil(K/32) scales.
inline void quantize_int4_row(const float* x, index_t K, std::uint8_t* packed, float* scales) noexcept {
  std::fill_n(packed, blocks_of(K, int4_group) * int4_group_bytes, std::uint8_t{0});
  for (index_t g = 0; g * int4_group < K; ++g) {
    const index_t k0 = g * int4_group, n = std::min(int4_group, K - k0);
    const float s = int4_scale(amax(x + k0, n));
    scales[g] = s;
    for (index_t i = 0; i < n; ++i) {
      const auto nibble = static_cast<std::uint8_t>(round_to_int4(x[k0 + i] / s) & 0xF);
      packed[(k0 + i) / 2] |= static_cast<std::uint8_t>((k0 + i) % 2 ? nibble << 4 : nibble);
    }
  }
}

/// Decodes the first K values of a row (padding elements are not read).
inline void dequantize_int4_row(const std::uint8_t* packed, const float* scales, index_t K, float* out) noexcept {
  for (index_t k = 0; k < K; ++k) out[k] = static_cast<float>(int4_code(packed, k)) * scales[k / int4_group];
}

}  // namespace polymoe::quantize
