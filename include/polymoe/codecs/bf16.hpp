#pragma once
// bfloat16 <-> fp32, bit-exact.
//
// float_to_bf16 rounds to nearest, ties to even (what torch's `.to(torch.bfloat16)` does for every
// finite and infinite input). A NaN stays a NaN: the sign and the top payload bits are kept and the
// quiet bit is set, so a NaN never rounds into an infinity. (torch's vectorised CPU path writes
// every NaN as 0xFFFF; both are NaN and no caller may depend on a NaN's bits.)
#include <bit>
#include <cstdint>
#include <span>

namespace polymoe::codecs {

/// fp32 -> bf16 bits, round to nearest even; NaN -> quiet NaN with the sign kept.
[[nodiscard]] constexpr std::uint16_t float_to_bf16(float x) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  const std::uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

/// bf16 bits -> fp32 (exact).
[[nodiscard]] constexpr float bf16_to_float(std::uint16_t h) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

/// Each value of `row` rounded to the nearest bf16 value (float_to_bf16), in place: the activation
/// rounding of the schemes with 16-bit activations (quant::bf16, mxfp4_w4a16, nvfp4_w4a16).
constexpr void round_to_bf16(std::span<float> row) noexcept {
  for (float& v : row) v = bf16_to_float(float_to_bf16(v));
}

}  // namespace polymoe::codecs
