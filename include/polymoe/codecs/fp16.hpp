#pragma once
// IEEE 754 binary16 <-> fp32, bit-exact (round to nearest even; infinities and NaNs kept, NaN
// payload truncated and quietened).
#include <bit>
#include <cstdint>

namespace polymoe::codecs {

/// binary16 bits -> fp32 (exact, subnormals included).
[[nodiscard]] constexpr float fp16_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F)  // inf / NaN: keep the payload, quieten a NaN
    return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13) | (mant ? 0x00400000u : 0u));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return std::bit_cast<float>(sign);
  // subnormal m * 2^-24: normalise into fp32
  const int lead = std::countl_zero(mant) - 21;  // shifts that bring the top set bit to bit 10
  mant = (mant << lead) & 0x3FFu;
  const std::uint32_t e32 = static_cast<std::uint32_t>(113 - lead);
  return std::bit_cast<float>(sign | (e32 << 23) | (mant << 13));
}

/// fp32 -> binary16 bits, round to nearest even; overflow -> infinity; NaN -> quiet NaN, sign kept.
[[nodiscard]] constexpr std::uint16_t float_to_fp16(float x) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t a = bits & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds past 65504
  if (a >= 0x38800000u) {  // normal half: rebias, round the 13 dropped bits to nearest even
    const std::uint32_t r = a - 0x38000000u + 0xFFFu + ((a >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (r >> 13));
  }
  // subnormal half (or zero): value / 2^-24 rounded to nearest even
  const std::uint32_t exp = a >> 23;
  if (exp < 102) return sign;  // below 2^-25: rounds to zero (2^-25 itself ties to even 0)
  const std::uint32_t sig = (a & 0x7FFFFFu) | 0x800000u;
  const std::uint32_t shift = 126u - exp;  // sig * 2^(exp-150) / 2^-24 = sig >> (126 - exp)
  const std::uint32_t half = 1u << (shift - 1);
  const std::uint32_t rem = sig & ((1u << shift) - 1u);
  std::uint32_t q = sig >> shift;
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<std::uint16_t>(sign | q);
}

}  // namespace polymoe::codecs
