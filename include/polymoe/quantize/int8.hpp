#pragma once
// Symmetric int8 quantization (W8A8): scale s = amax / 127 (1 when amax is 0);
// code = clamp(round_half_even(x / s), -128, 127) with fp32 division; value = code * s.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

#include <polymoe/quantize/common.hpp>

namespace polymoe::quantize {

/// The int8 scale for values whose largest magnitude is `a`.
[[nodiscard]] inline float int8_scale(float a) noexcept { return a > 0.0f ? a / 127.0f : 1.0f; }

/// Round to nearest, ties to even, saturating to [-128, 127]; NaN -> 0. Written out rather than
/// std::nearbyint so that the result does not depend on the floating-point environment.
[[nodiscard]] inline std::int8_t round_to_int8(float v) noexcept {
  if (!(v == v)) return 0;
  if (v >= 127.0f) return 127;
  if (v <= -128.0f) return -128;
  const float f = std::floor(v);
  const float d = v - f;  // exact: |v| < 2^7
  float r = f;
  if (d > 0.5f || (d == 0.5f && std::fmod(f, 2.0f) != 0.0f)) r = f + 1.0f;
  return static_cast<std::int8_t>(r);
}

/// q[i] = round_to_int8(x[i] / scale) for n values.
inline void quantize_int8(const float* x, index_t n, float scale, std::int8_t* q) noexcept {
  for (index_t i = 0; i < n; ++i) q[i] = round_to_int8(x[i] / scale);
}

/// Dynamic per-token activation quantization in place: x = round_to_int8(x / s) * s with
/// s = amax(row) / 127. A row holding a non-finite value is left as it is; a zero row stays zero.
inline void fake_quantize_int8(std::span<float> row) noexcept {
  const index_t n = static_cast<index_t>(row.size());
  const float a = amax_if_finite(row.data(), n);
  if (std::isnan(a) || a == 0.0f) return;
  const float s = int8_scale(a);
  for (float& v : row) v = static_cast<float>(round_to_int8(v / s)) * s;
}

}  // namespace polymoe::quantize
