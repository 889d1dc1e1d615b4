#pragma once
// fp8 E4M3FN quantization: scales, a scaled row, 128x128 weight blocks (DeepSeek-V3) and the
// dynamic activation quantizers (per token, or per token in groups of 128).
//
// Arithmetic, exactly: scale s = amax / 448 (1 when amax is 0: any scale encodes zeros);
// code = float_to_e4m3_sat(x / s) (fp32 division, round to nearest even, clamped to ±448);
// value = e4m3_to_float(code) * s (one fp32 multiplication).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

#include <polymoe/codecs/e4m3.hpp>
#include <polymoe/quantize/common.hpp>

namespace polymoe::quantize {

/// The E4M3 scale (dequantization multiplier) for values whose largest magnitude is `a`.
[[nodiscard]] inline float e4m3_scale(float a) noexcept { return a > 0.0f ? a / codecs::e4m3_max : 1.0f; }

/// q[i] = e4m3_sat(x[i] / scale) for n values.
inline void quantize_e4m3(const float* x, index_t n, float scale, std::uint8_t* q) noexcept {
  for (index_t i = 0; i < n; ++i) q[i] = codecs::float_to_e4m3_sat(x[i] / scale);
}

/// out[i] = e4m3(q[i]) * scale for n codes.
inline void dequantize_e4m3(const std::uint8_t* q, index_t n, float scale, float* out) noexcept {
  for (index_t i = 0; i < n; ++i) out[i] = codecs::e4m3_to_float(q[i]) * scale;
}

/// Quantizes a rows x cols matrix (row stride ld) in block x block tiles, each with its own scale
/// amax(tile) / 448; edge tiles are partial (the same result as zero padding, which leaves amax
/// unchanged). q is rows x cols (dense), scale_inv is ceil(rows/block) x ceil(cols/block): the
/// DeepSeek-V3 `weight_scale_inv` (W = q · s).
inline void quantize_e4m3_blocks(const float* w, index_t rows, index_t cols, index_t ld, index_t block,
                                 std::uint8_t* q, float* scale_inv) noexcept {
  const index_t bc = blocks_of(cols, block);
  for (index_t br = 0; br * block < rows; ++br)
    for (index_t b = 0; b < bc; ++b) {
      const index_t r0 = br * block, r1 = std::min(rows, r0 + block);
      const index_t c0 = b * block, n = std::min(cols, c0 + block) - c0;
      float a = 0.0f;
      for (index_t r = r0; r < r1; ++r) a = std::max(a, amax(w + r * ld + c0, n));
      const float s = e4m3_scale(a);
      scale_inv[br * bc + b] = s;
      for (index_t r = r0; r < r1; ++r) quantize_e4m3(w + r * ld + c0, n, s, q + r * cols + c0);
    }
}

/// Dequantizes what quantize_e4m3_blocks wrote, into a rows x cols matrix with row stride ld.
inline void dequantize_e4m3_blocks(const std::uint8_t* q, const float* scale_inv, index_t rows, index_t cols,
                                   index_t block, float* out, index_t ld) noexcept {
  const index_t bc = blocks_of(cols, block);
  for (index_t r = 0; r < rows; ++r)
    for (index_t c = 0; c < cols; ++c)
      out[r * ld + c] = codecs::e4m3_to_float(q[r * cols + c]) * scale_inv[(r / block) * bc + c / block];
}

/// Dynamic activation quantization in place: each group of `group` consecutive values (the last
/// one may be partial; group >= row size means one group per row, "per token") is replaced by
/// e4m3(x / s) * s with s = amax(group) / 448. A group holding a non-finite value is left as it is
/// (the NaN or infinity then propagates as it would in fp32); an all-zero group stays zero.
inline void fake_quantize_e4m3(std::span<float> row, index_t group) noexcept {
  const index_t n = static_cast<index_t>(row.size());
  for (index_t g0 = 0; g0 < n; g0 += group) {
    float* x = row.data() + g0;
    const index_t len = std::min(group, n - g0);
    const float a = amax_if_finite(x, len);
    if (std::isnan(a) || a == 0.0f) continue;
    const float s = e4m3_scale(a);
    for (index_t i = 0; i < len; ++i) x[i] = codecs::e4m3_to_float(codecs::float_to_e4m3_sat(x[i] / s)) * s;
  }
}

}  // namespace polymoe::quantize
