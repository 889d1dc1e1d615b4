#pragma once
// NVFP4 (E2M1 elements, blocks of 16, E4M3 block scale, fp32 per-tensor scale), ModelOpt's
// convention. One row of K values is ceil(K/16) blocks of 8 packed bytes (element 2i in the low
// nibble) plus one E4M3 block-scale code each; the tensor has one fp32 scale `scale_2`.
//
// Arithmetic, exactly:
//   scale_2 = amax(tensor) / (6 · 448)                      (1 for an all-zero tensor)
//   block scale code = e4m3_sat(amax(block) / (6 · scale_2)) with the divisor computed first in
//                      fp32; an all-zero block gets scale 1.0 (code 0x38)
//   element = e2m1(x / (e4m3(code) · scale_2)), divisor computed first in fp32; when the block
//             scale itself rounded to zero every element is written 0 (the block decodes to 0)
//   value = e2m1(element) · e4m3(code) · scale_2, multiplied left to right in fp32
// A partial last block (K not a multiple of 16) is padded with zero elements.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

#include <polymoe/codecs/e2m1.hpp>
#include <polymoe/codecs/e4m3.hpp>
#include <polymoe/quantize/common.hpp>

namespace polymoe::quantize {

inline constexpr index_t nvfp4_block = 16;       ///< elements per NVFP4 block
inline constexpr index_t nvfp4_block_bytes = 8;  ///< packed bytes per block
inline constexpr std::uint8_t e4m3_one = 0x38;   ///< E4M3 code of 1.0

/// The per-tensor scale (ModelOpt weight_scale_2, or an activation's input_scale) for amax `a`.
[[nodiscard]] inline float nvfp4_scale_2(float a) noexcept {
  return a > 0.0f ? a / (codecs::e2m1_max * codecs::e4m3_max) : 1.0f;
}

/// The E4M3 block-scale code of a block whose largest magnitude is `block_amax`.
[[nodiscard]] inline std::uint8_t nvfp4_block_scale_code(float block_amax, float scale_2) noexcept {
  if (block_amax == 0.0f) return e4m3_one;
  return codecs::float_to_e4m3_sat(block_amax / (codecs::e2m1_max * scale_2));
}

/// Quantizes one block of n <= 16 finite values into 8 bytes (zero padded); returns the scale code.
inline std::uint8_t quantize_nvfp4_block(const float* x, index_t n, float scale_2, std::uint8_t* packed) noexcept {
  const std::uint8_t code = nvfp4_block_scale_code(amax(x, n), scale_2);
  const float denom = codecs::e4m3_to_float(code) * scale_2;
  float v[nvfp4_block] = {};
  if (denom != 0.0f)
    for (index_t i = 0; i < n; ++i) v[i] = x[i] / denom;
  codecs::pack_e2m1(v, nvfp4_block, packed);
  return code;
}

/// Quantizes a row of K values into ceil(K/16)·8 bytes and ceil(K/16) block-scale codes.
inline void quantize_nvfp4_row(const float* x, index_t K, float scale_2, std::uint8_t* packed,
                               std::uint8_t* scales) noexcept {
  for (index_t b = 0; b * nvfp4_block < K; ++b)
    scales[b] = quantize_nvfp4_block(x + b * nvfp4_block, std::min(nvfp4_block, K - b * nvfp4_block), scale_2,
                                     packed + b * nvfp4_block_bytes);
}

/// Decodes the first K values of a row (padding elements are not read).
inline void dequantize_nvfp4_row(const std::uint8_t* packed, const std::uint8_t* scales, float scale_2, index_t K,
                                 float* out) noexcept {
  for (index_t i = 0; i < K; ++i) {
    const std::uint8_t byte = packed[i / 2];
    const auto nibble = static_cast<std::uint8_t>((i % 2) ? (byte >> 4) : (byte & 0xFu));
    out[i] = codecs::e2m1_to_float(nibble) * codecs::e4m3_to_float(scales[i / nvfp4_block]) * scale_2;
  }
}

/// W4A4 activation quantization in place, one token (row) at a time: the row's own global scale
/// input_scale = amax(row) / (6 · 448) (dynamic, per token), then blocks of 16 as for weights.
/// A row holding a non-finite value is left as it is; a zero row stays zero.
inline void fake_quantize_nvfp4(std::span<float> row) noexcept {
  const index_t n = static_cast<index_t>(row.size());
  const float a = amax_if_finite(row.data(), n);
  if (std::isnan(a) || a == 0.0f) return;
  const float s2 = nvfp4_scale_2(a);
  std::uint8_t packed[nvfp4_block_bytes], code = 0;
  for (index_t b = 0; b * nvfp4_block < n; ++b) {
    float* x = row.data() + b * nvfp4_block;
    const index_t len = std::min(nvfp4_block, n - b * nvfp4_block);
    code = quantize_nvfp4_block(x, len, s2, packed);
    dequantize_nvfp4_row(packed, &code, s2, len, x);
  }
}

}  // namespace polymoe::quantize
