#pragma once
// FP4 E2M1: 1 sign, 2 exponent (bias 1), 1 mantissa bit; the 8 magnitudes {0, 0.5, 1, 1.5, 2, 3, 4,
// 6}. Code (nibble) = sign << 3 | magnitude index. No inf, no NaN.
//
// Encoding (DESIGN.md "Quantization", as ModelOpt, torchao and PTX `cvt.rn.satfinite.e2m1x2` do):
// nearest value, ties to the even code, saturating at ±6; a result of zero is always written +0
// (code 0), whatever the input's sign. NaN has no E2M1 code: it is written as +0 (code 0) — an MX
// block holding a NaN is marked by its NaN scale (e8m0 0xFF), not by its elements.
//
// Packing: two codes per byte, element 2i in the LOW nibble, element 2i+1 in the high nibble.
#include <bit>
#include <cstddef>
#include <cstdint>

namespace polymoe::codecs {

/// Magnitudes of E2M1 codes 0..7.
inline constexpr float e2m1_values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

/// Largest E2M1 magnitude.
inline constexpr float e2m1_max = 6.0f;

/// E2M1 nibble (low 4 bits used) -> fp32. Code 8 decodes to -0.
[[nodiscard]] constexpr float e2m1_to_float(std::uint8_t nibble) noexcept {
  const float v = e2m1_values[nibble & 0x7u];
  return (nibble & 0x8u) ? -v : v;
}

/// fp32 -> E2M1 nibble: nearest, ties to even code, saturating at ±6, zero as +0, NaN -> +0.
[[nodiscard]] constexpr std::uint8_t float_to_e2m1(float x) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const float a = std::bit_cast<float>(bits & 0x7FFFFFFFu);
  // Count the decision boundaries below |x|: '>' where the tie goes down (to the even code below),
  // '>=' where it goes up. Every comparison with NaN is false, so NaN gives 0.
  const unsigned idx = static_cast<unsigned>(a > 0.25f) + static_cast<unsigned>(a >= 0.75f) +
                       static_cast<unsigned>(a > 1.25f) + static_cast<unsigned>(a >= 1.75f) +
                       static_cast<unsigned>(a > 2.5f) + static_cast<unsigned>(a >= 3.5f) +
                       static_cast<unsigned>(a > 5.0f);
  const unsigned sign = (idx != 0u) ? ((bits >> 28) & 0x8u) : 0u;
  return static_cast<std::uint8_t>(sign | idx);
}

/// Encodes n floats into (n + 1) / 2 bytes; element 2i goes to the low nibble of out[i]. For odd n
/// the last byte's high nibble is 0.
inline void pack_e2m1(const float* in, std::size_t n, std::uint8_t* out) noexcept {
  const std::size_t pairs = n / 2;
  for (std::size_t i = 0; i < pairs; ++i)
    out[i] =
        static_cast<std::uint8_t>(float_to_e2m1(in[2 * i]) | (float_to_e2m1(in[2 * i + 1]) << 4));
  if (n % 2) out[pairs] = float_to_e2m1(in[n - 1]);
}

/// Decodes n elements from (n + 1) / 2 packed bytes (element 2i from the low nibble of in[i]).
inline void unpack_e2m1(const std::uint8_t* in, std::size_t n, float* out) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t byte = in[i / 2];
    out[i] = e2m1_to_float(static_cast<std::uint8_t>((i % 2) ? (byte >> 4) : (byte & 0xFu)));
  }
}

}  // namespace polymoe::codecs
