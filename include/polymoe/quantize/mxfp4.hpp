#pragma once
// MXFP4 (OCP MX, E2M1 elements): one row of K values is ceil(K/32) blocks; each block is 16 bytes
// of packed E2M1 codes (element 2i in the low nibble of byte i) and one E8M0 scale code.
//
// Arithmetic, exactly: scale code = mxfp4_scale_code(amax(block)) (exponent floor(log2 amax) - 2,
// an all-zero block gets code 0); element = float_to_e2m1(x / e8m0(code)) (nearest, ties to the
// even code, saturating at ±6, zero written +0); value = e2m1(element) * e8m0(code).
// A partial last block (K not a multiple of 32) is padded with zero elements.
#include <algorithm>
#include <cstdint>

#include <polymoe/codecs/e2m1.hpp>
#include <polymoe/codecs/e8m0.hpp>
#include <polymoe/quantize/common.hpp>

namespace polymoe::quantize {

inline constexpr index_t mxfp4_block = 32;        ///< elements per MXFP4 block
inline constexpr index_t mxfp4_block_bytes = 16;  ///< packed bytes per block

/// Quantizes one block of n <= 32 finite values into 16 bytes (zero padded); returns the scale code.
inline std::uint8_t quantize_mxfp4_block(const float* x, index_t n, std::uint8_t* packed) noexcept {
  const std::uint8_t code = codecs::mxfp4_scale_code(amax(x, n));
  const float scale = codecs::e8m0_to_float(code);
  float v[mxfp4_block] = {};
  for (index_t i = 0; i < n; ++i) v[i] = x[i] / scale;
  codecs::pack_e2m1(v, mxfp4_block, packed);
  return code;
}

/// Quantizes a row of K values into ceil(K/32)·16 bytes and ceil(K/32) scale codes.
inline void quantize_mxfp4_row(const float* x, index_t K, std::uint8_t* blocks, std::uint8_t* scales) noexcept {
  for (index_t b = 0; b * mxfp4_block < K; ++b)
    scales[b] = quantize_mxfp4_block(x + b * mxfp4_block, std::min(mxfp4_block, K - b * mxfp4_block),
                                     blocks + b * mxfp4_block_bytes);
}

/// Decodes the first K values of a row (padding elements are not read).
inline void dequantize_mxfp4_row(const std::uint8_t* blocks, const std::uint8_t* scales, index_t K,
                                 float* out) noexcept {
  for (index_t i = 0; i < K; ++i) {
    const std::uint8_t byte = blocks[(i / mxfp4_block) * mxfp4_block_bytes + (i % mxfp4_block) / 2];
    const auto nibble = static_cast<std::uint8_t>((i % 2) ? (byte >> 4) : (byte & 0xFu));
    out[i] = codecs::e2m1_to_float(nibble) * codecs::e8m0_to_float(scales[i / mxfp4_block]);
  }
}

}  // namespace polymoe::quantize
