#pragma once
// fp8 E4M3FN <-> fp32, bit-exact with torch.float8_e4m3fn.
//
// Format: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; S.1111.111 (0x7F / 0xFF) is
// NaN; largest finite 448 (0x7E); subnormals m * 2^-9.
//
//   float_to_e4m3      torch's cast: round to nearest even, NOT saturating — a value that rounds
//   past
//                      448 (|x| > 464), an infinity or a NaN becomes the NaN code with the input's
//                      sign.
//   float_to_e4m3_sat  what quantizers use: clamps to ±448 first (±inf -> ±448); NaN stays NaN.
#include <bit>
#include <cstdint>

namespace polymoe::codecs {

/// E4M3FN code -> fp32 (exact). NaN codes give sign|0x7FF00000, the bits torch produces.
[[nodiscard]] constexpr float e4m3_to_float(std::uint8_t code) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  const std::uint32_t exp = (code >> 3) & 0xFu;
  const std::uint32_t mant = code & 0x7u;
  if (exp == 0xF && mant == 0x7) return std::bit_cast<float>(sign | 0x7FF00000u);
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 120u) << 23) | (mant << 20));
  const float v = static_cast<float>(mant) * 0x1p-9f;  // subnormal: exact
  return (code & 0x80u) ? -v : v;
}

/// fp32 -> E4M3FN code, round to nearest even, non-saturating (matches torch's cast exactly).
[[nodiscard]] constexpr std::uint8_t float_to_e4m3(float x) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  std::uint32_t a = bits & 0x7FFFFFFFu;
  if (a >= 0x43F00000u) return static_cast<std::uint8_t>(sign | 0x7Fu);  // >= 480, inf, NaN
  if (a < 0x3C800000u) {  // below 2^-6: subnormal result q = round(x / 2^-9)
    const std::uint32_t exp = a >> 23;
    if (exp < 117u) return sign;  // < 2^-10: rounds to zero (2^-10 ties to even 0)
    const std::uint32_t sig = (a & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t shift = 141u - exp;
    const std::uint32_t half = 1u << (shift - 1);
    const std::uint32_t rem = sig & ((1u << shift) - 1u);
    std::uint32_t q = sig >> shift;
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<std::uint8_t>(sign | q);
  }
  // normal: rebias 127 -> 7 and round the 20 dropped bits to nearest even; a carry into the
  // exponent is the right answer, and 448 < |x| <= 464 .. 480 lands on 0x7E or 0x7F (NaN) as torch
  // does.
  a = a - (120u << 23) + 0x7FFFFu + ((a >> 20) & 1u);
  return static_cast<std::uint8_t>(sign | (a >> 20));
}

/// fp32 -> E4M3FN code, clamped to ±448 first (±inf -> ±448); NaN -> NaN code with its sign.
[[nodiscard]] constexpr std::uint8_t float_to_e4m3_sat(float x) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t a = bits & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7Fu);
  if (a >= 0x43E00000u) return static_cast<std::uint8_t>(sign | 0x7Eu);
  return float_to_e4m3(x);
}

/// Largest finite E4M3FN magnitude.
inline constexpr float e4m3_max = 448.0f;

}  // namespace polymoe::codecs
