#pragma once
// fp8 E5M2 <-> fp32, bit-exact with torch.float8_e5m2.
//
// Format: 1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-like: 0x7C = inf, 0x7D..0x7F = NaN,
// largest finite 57344 (0x7B), subnormals m * 2^-16. The encoder rounds to nearest even; values
// that round past 57344 become infinity (torch's cast does not saturate); NaN -> 0x7F with the
// sign.
#include <bit>
#include <cstdint>

namespace polymoe::codecs {

/// E5M2 code -> fp32 (exact). NaN codes keep their payload and are quietened, as torch's decode
/// does.
[[nodiscard]] constexpr float e5m2_to_float(std::uint8_t code) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  const std::uint32_t exp = (code >> 2) & 0x1Fu;
  const std::uint32_t mant = code & 0x3u;
  if (exp == 0x1F)
    return std::bit_cast<float>(sign | 0x7F800000u | (mant << 21) | (mant ? 0x00400000u : 0u));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 21));
  const float v = static_cast<float>(mant) * 0x1p-16f;  // subnormal: exact
  return (code & 0x80u) ? -v : v;
}

/// fp32 -> E5M2 code, round to nearest even, overflow -> inf (matches torch's cast exactly).
[[nodiscard]] constexpr std::uint8_t float_to_e5m2(float x) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  std::uint32_t a = bits & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7Fu);   // NaN
  if (a >= 0x47800000u) return static_cast<std::uint8_t>(sign | 0x7Cu);  // >= 65536, inf
  if (a < 0x38800000u) {  // below 2^-14: subnormal result q = round(x / 2^-16)
    const std::uint32_t exp = a >> 23;
    if (exp < 110u) return sign;  // < 2^-17: rounds to zero
    const std::uint32_t sig = (a & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t shift = 134u - exp;
    const std::uint32_t half = 1u << (shift - 1);
    const std::uint32_t rem = sig & ((1u << shift) - 1u);
    std::uint32_t q = sig >> shift;
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<std::uint8_t>(sign | q);
  }
  a = a - (112u << 23) + 0xFFFFFu + ((a >> 21) & 1u);
  return static_cast<std::uint8_t>(sign | (a >> 21));
}

/// Largest finite E5M2 magnitude.
inline constexpr float e5m2_max = 57344.0f;

}  // namespace polymoe::codecs
