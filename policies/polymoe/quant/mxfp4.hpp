#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <polymoe/core/roles.hpp>
#include <polymoe/codecs/bf16.hpp>
#include <polymoe/quantize/mxfp4.hpp>
#include <polymoe/quant/checkpoint.hpp>

namespace polymoe::quant {

/// MXFP4 weights (OCP MX: blocks of 32 E2M1 values sharing one E8M0 scale, exponent
/// floor(log2(amax)) - 2), activations untouched (W4A32: fp32 activations; quant::mxfp4_w4a16
/// rounds them to bf16, as DESIGN.md's W4A16 and a bf16 engine do). Stored in GPT-OSS's layout,
/// per projection: `blocks` [E, N, ceil(K/32), 16] bytes (element 2i in the low nibble) and
/// `scales` [E, N, ceil(K/32)], N = output rows, K = input (w13: N = rows13, K = H; w2: N = H,
/// K = I). K not a multiple of 32: the last block is padded with zero elements.
///
///   // GPT-OSS checkpoint: gate_up rows interleaved (even gate, odd up), re-laid at load
///   auto w = polymoe::quant::mxfp4::weights::from_blocks(shape, gu_blocks, gu_scales, down_blocks,
///                                                        down_scales, b13, b2, polymoe::quant::gate_up_order::interleaved);
struct mxfp4 {
  using quant_concept = quant_tag;
  static constexpr std::string_view name = "mxfp4";
  static constexpr index_t block = polymoe::quantize::mxfp4_block;

  [[nodiscard]] static constexpr index_t blocks_per_row(index_t K) noexcept {
    return polymoe::quantize::blocks_of(K, block);
  }

  struct weights : ExpertStore {
    std::vector<std::uint8_t> w13_blocks;  ///< [E, rows13, ceil(H/32), 16], gate rows then up rows
    std::vector<std::uint8_t> w13_scales;  ///< [E, rows13, ceil(H/32)] E8M0 codes
    std::vector<std::uint8_t> w2_blocks;   ///< [E, H, ceil(I/32), 16]
    std::vector<std::uint8_t> w2_scales;   ///< [E, H, ceil(I/32)]

    void validate(std::string_view what) const {
      const ExpertShape& s = shape_;
      const index_t hb = blocks_per_row(s.hidden), ib = blocks_per_row(s.intermediate);
      check_sizes(what, {{"w13_blocks", w13_blocks.size(), count(s.rows13(), hb * 16)},
                         {"w13_scales", w13_scales.size(), count(s.rows13(), hb)},
                         {"w2_blocks", w2_blocks.size(), count(s.hidden, ib * 16)},
                         {"w2_scales", w2_scales.size(), count(s.hidden, ib)}});
    }

    /// From stored MXFP4 tensors (no requantization). w13 in `order`: with
    /// gate_up_order::interleaved (GPT-OSS `gate_up_proj_blocks` / `_scales` / `_bias`) the rows
    /// of blocks, scales and b13 are moved together into canonical order (see relay_gate_up).
    /// A scale code 0xFF (E8M0 NaN) is rejected.
    static weights from_blocks(const ExpertShape& s, const tensor_view<std::uint8_t>& w13_blocks,
                               const tensor_view<std::uint8_t>& w13_scales, const tensor_view<std::uint8_t>& w2_blocks,
                               const tensor_view<std::uint8_t>& w2_scales, Matrix b13 = {}, Matrix b2 = {},
                               gate_up_order order = gate_up_order::stacked) {
      constexpr std::string_view what = "quant::mxfp4::weights::from_blocks";
      weights w{detail::checked_store(s, what, std::move(b13), std::move(b2)), {}, {}, {}, {}};
      const index_t R = s.rows13(), nbH = blocks_per_row(s.hidden), nbI = blocks_per_row(s.intermediate);
      detail::require_shape(w13_blocks, what, "w13_blocks", {s.experts, R, nbH, 16});
      detail::require_shape(w13_scales, what, "w13_scales", {s.experts, R, nbH});
      detail::require_shape(w2_blocks, what, "w2_blocks", {s.experts, s.hidden, nbI, 16});
      detail::require_shape(w2_scales, what, "w2_scales", {s.experts, s.hidden, nbI});
      detail::require_elements(element::e8m0, w13_scales.data, what, "w13_scales");
      detail::require_elements(element::e8m0, w2_scales.data, what, "w2_scales");
      w.w13_blocks = detail::copy_of(w13_blocks), w.w13_scales = detail::copy_of(w13_scales);
      w.w2_blocks = detail::copy_of(w2_blocks), w.w2_scales = detail::copy_of(w2_scales);
      if (order == gate_up_order::interleaved) {
        require(s.gated, what, ": gate_up_order::interleaved needs a gated shape");
        relay_gate_up(w);
      }
      return w;
    }
  };

  /// Re-lays w13 from GPT-OSS's interleaved rows (2j gate, 2j+1 up) to canonical order by moving
  /// whole quantized rows: each row's blocks, its scale codes and its b13 entry move together, so
  /// the values are exactly those of dequantize-then-deinterleave.
  static void relay_gate_up(weights& w) {
    const ExpertShape& s = w.shape_;
    const index_t R = s.rows13(), nb = blocks_per_row(s.hidden);
    polymoe::quantize::deinterleave_rows(w.w13_blocks, s.experts, R, nb * 16);
    polymoe::quantize::deinterleave_rows(w.w13_scales, s.experts, R, nb);
    if (s.bias) {
      std::vector<float> b(w.b13.data(), w.b13.data() + w.b13.size());
      polymoe::quantize::deinterleave_rows(b, s.experts, R, 1);
      std::copy(b.begin(), b.end(), w.b13.data());
    }
  }

  static weights quantize(const ExpertWeights& f) {
    constexpr std::string_view what = "quant::mxfp4::quantize";
    f.validate(what);
    weights w{ExpertStore::from(f), {}, {}, {}, {}};
    encode(f.w13, w.w13_blocks, w.w13_scales);
    encode(f.w2, w.w2_blocks, w.w2_scales);
    return w;
  }
  static void dequantize(const weights& w, index_t e, MatrixRef w13, MatrixRef w2) {
    const ExpertShape& s = w.shape_;
    decode(w.w13_blocks, w.w13_scales, e * s.rows13(), w13);
    decode(w.w2_blocks, w.w2_scales, e * s.hidden, w2);
  }
  static void quantize_activation(std::span<float>) noexcept {}

 private:
  static void encode(const Matrix& m, std::vector<std::uint8_t>& blocks, std::vector<std::uint8_t>& scales) {
    const index_t nb = blocks_per_row(m.cols());
    blocks.assign(static_cast<std::size_t>(m.rows() * nb * 16), 0);
    scales.assign(static_cast<std::size_t>(m.rows() * nb), 0);
    for_each_part(m.rows(), 64, [&](index_t r) {
      polymoe::quantize::quantize_mxfp4_row(m.row(r).data(), m.cols(), blocks.data() + r * nb * 16,
                                            scales.data() + r * nb);
    });
  }
  static void decode(const std::vector<std::uint8_t>& blocks, const std::vector<std::uint8_t>& scales, index_t row0,
                     MatrixRef out) {
    const index_t nb = blocks_per_row(out.cols());
    for (index_t r = 0; r < out.rows(); ++r)
      polymoe::quantize::dequantize_mxfp4_row(blocks.data() + (row0 + r) * nb * 16, scales.data() + (row0 + r) * nb,
                                              out.cols(), out.row(r).data());
  }
};

/// MXFP4 weights with 16-bit activations (W4A16, what GPT-OSS engines run): each GEMM input row
/// (the hidden states, weighted first where the routing weight scales the input, and the
/// activations between the GEMMs) rounded to bf16, round to nearest even; fp32 accumulation and
/// top-k sum. The same weights as quant::mxfp4 (a checkpoint loads for either).
struct mxfp4_w4a16 : mxfp4 {
  static constexpr std::string_view name = "mxfp4_w4a16";
  static void quantize_activation(std::span<float> row) noexcept { codecs::round_to_bf16(row); }
};

/// OCP MXFP4 tensors: per projection `weight` U8 [N, ceil(K/32)·16] (two E2M1 codes a byte) and
/// `weight_scale` U8 E8M0 [N, ceil(K/32)]; GPT-OSS stacks them as `*_blocks` [E, N, ceil(K/32), 16]
/// and `*_scales` [E, N, ceil(K/32)], gate and up rows interleaved.
template <>
struct checkpoint_layout<mxfp4::weights> {
  using W = mxfp4::weights;
  using scheme = mxfp4;
  static constexpr std::string_view name = "mxfp4", alias = "mxfp4";
  static constexpr std::string_view quantization_config = R"({"quant_method": "mxfp4"})";
  static constexpr auto tensors = std::tuple{
      stored_tensor<&W::w13_blocks, &W::w2_blocks>{".weight", "_blocks", element::u8, {}, {mxfp4::block, 16}},
      stored_tensor<&W::w13_scales, &W::w2_scales>{".weight_scale", "_scales", element::e8m0, {}, {mxfp4::block, 1}}};
};

}  // namespace polymoe::quant
