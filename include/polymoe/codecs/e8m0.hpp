#pragma once
// E8M0 (float8_e8m0fnu): an unsigned power-of-two scale 2^(code-127); 0xFF is NaN; no zero, no
// sign. Used as the shared block scale of the OCP MX formats (MXFP4: 32 E2M1 elements per scale).
#include <bit>
#include <cstdint>

namespace polymoe::codecs {

/// E8M0 code -> fp32: 2^(code-127) (code 0 is the fp32 subnormal 2^-127), 0xFF -> quiet NaN.
[[nodiscard]] constexpr float e8m0_to_float(std::uint8_t code) noexcept {
  if (code == 0xFF) return std::bit_cast<float>(0x7FC00000u);
  if (code == 0) return std::bit_cast<float>(0x00400000u);
  return std::bit_cast<float>(static_cast<std::uint32_t>(code) << 23);
}

/// floor(log2(|x|)) for finite non-zero x, by bit manipulation (subnormals included).
[[nodiscard]] constexpr int floor_log2(float x) noexcept {
  const std::uint32_t a = std::bit_cast<std::uint32_t>(x) & 0x7FFFFFFFu;
  const int exp = static_cast<int>(a >> 23);
  if (exp != 0) return exp - 127;
  return (31 - std::countl_zero(a)) - 149;
}

/// The E8M0 scale code of an OCP MX block whose largest magnitude is `amax`, for an element format
/// whose largest power of two is 2^element_emax (E2M1: 2, the default; E4M3: 8; E5M2: 15).
///
/// Per the OCP MX spec: exponent = floor(log2(amax)) - element_emax, code = exponent + 127, clamped
/// to the representable range [0, 254]. An all-zero block gets the smallest scale (code 0). A block
/// holding an infinity or a NaN gets the NaN scale 0xFF (it has no finite scale). The sign of amax
/// is ignored. Elements are then x / e8m0_to_float(code), which may exceed the element range (e.g.
/// amax 7.9 with E2M1 gives scale 1 and 7.9 saturates to 6) — the spec's choice.
[[nodiscard]] constexpr std::uint8_t e8m0_mx_scale_code(float amax, int element_emax = 2) noexcept {
  const std::uint32_t a = std::bit_cast<std::uint32_t>(amax) & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) return 0xFF;
  if (a == 0) return 0;
  const int code = floor_log2(amax) - element_emax + 127;
  return static_cast<std::uint8_t>(code < 0 ? 0 : (code > 254 ? 254 : code));
}

/// MXFP4 (E2M1 elements) scale code for a block amax: e8m0_mx_scale_code(amax, 2).
[[nodiscard]] constexpr std::uint8_t mxfp4_scale_code(float amax) noexcept {
  return e8m0_mx_scale_code(amax, 2);
}

}  // namespace polymoe::codecs
