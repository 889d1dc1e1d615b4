#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <polymoe/core/roles.hpp>
#include <polymoe/codecs/bf16.hpp>
#include <polymoe/quantize/nvfp4.hpp>
#include <polymoe/quant/checkpoint.hpp>

namespace polymoe::quant {

/// NVFP4 weights, ModelOpt's convention: blocks of 16 E2M1 values with an E4M3 block scale, and one
/// fp32 `weight_scale_2` = amax / (6 · 448) per expert per projection (w13: gate and up together,
/// as the fused GEMM needs one; w2). W = e2m1(q) · e4m3(block scale) · weight_scale_2.
/// Activations untouched (W4A32; quant::nvfp4_w4a16 rounds them to bf16). K not a multiple of 16:
/// the last block is padded with zero elements. Layout per projection: `weight` [E, N, ceil(K/16)·8] packed bytes (element
/// 2i in the low nibble), `weight_scale` [E, N, ceil(K/16)] E4M3 codes, `weight_scale_2` [E].
///
///   polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::nvfp4, polymoe::kernel::reference> layer(cfg, w);
struct nvfp4 {
  using quant_concept = quant_tag;
  static constexpr std::string_view name = "nvfp4";
  static constexpr index_t block = polymoe::quantize::nvfp4_block;

  [[nodiscard]] static constexpr index_t blocks_per_row(index_t K) noexcept {
    return polymoe::quantize::blocks_of(K, block);
  }

  struct weights : ExpertStore {
    std::vector<std::uint8_t> w13;           ///< [E, rows13, ceil(H/16)·8] packed E2M1
    std::vector<std::uint8_t> w13_scale;     ///< [E, rows13, ceil(H/16)] E4M3 block scales
    std::vector<float> w13_scale_2;          ///< [E]
    std::vector<std::uint8_t> w2;            ///< [E, H, ceil(I/16)·8]
    std::vector<std::uint8_t> w2_scale;      ///< [E, H, ceil(I/16)]
    std::vector<float> w2_scale_2;           ///< [E]

    void validate(std::string_view what) const {
      const ExpertShape& s = shape_;
      const index_t hb = blocks_per_row(s.hidden), ib = blocks_per_row(s.intermediate);
      check_sizes(what, {{"w13", w13.size(), count(s.rows13(), hb * 8)},
                         {"w13_scale", w13_scale.size(), count(s.rows13(), hb)},
                         {"w13_scale_2", w13_scale_2.size(), count(1, 1)},
                         {"w2", w2.size(), count(s.hidden, ib * 8)},
                         {"w2_scale", w2_scale.size(), count(s.hidden, ib)},
                         {"w2_scale_2", w2_scale_2.size(), count(1, 1)}});
    }

    /// From stored ModelOpt-style tensors (no requantization); shapes as in the members above.
    /// E4M3 NaN block-scale codes and non-finite or negative weight_scale_2 are rejected.
    static weights from_checkpoint(const ExpertShape& s, const tensor_view<std::uint8_t>& w13,
                                   const tensor_view<std::uint8_t>& w13_scale, const tensor_view<float>& w13_scale_2,
                                   const tensor_view<std::uint8_t>& w2, const tensor_view<std::uint8_t>& w2_scale,
                                   const tensor_view<float>& w2_scale_2, Matrix b13 = {}, Matrix b2 = {}) {
      constexpr std::string_view what = "quant::nvfp4::weights::from_checkpoint";
      weights w{detail::checked_store(s, what, std::move(b13), std::move(b2)), {}, {}, {}, {}, {}, {}};
      const index_t R = s.rows13(), nbH = blocks_per_row(s.hidden), nbI = blocks_per_row(s.intermediate);
      detail::require_shape(w13, what, "w13", {s.experts, R, nbH * 8});
      detail::require_shape(w13_scale, what, "w13_scale", {s.experts, R, nbH});
      detail::require_shape(w13_scale_2, what, "w13_scale_2", {s.experts});
      detail::require_shape(w2, what, "w2", {s.experts, s.hidden, nbI * 8});
      detail::require_shape(w2_scale, what, "w2_scale", {s.experts, s.hidden, nbI});
      detail::require_shape(w2_scale_2, what, "w2_scale_2", {s.experts});
      detail::require_scales(w13_scale_2.data, what, "w13_scale_2");
      detail::require_scales(w2_scale_2.data, what, "w2_scale_2");
      detail::require_elements(element::e4m3_scale, w13_scale.data, what, "w13_scale");
      detail::require_elements(element::e4m3_scale, w2_scale.data, what, "w2_scale");
      w.w13 = detail::copy_of(w13), w.w13_scale = detail::copy_of(w13_scale);
      w.w13_scale_2 = detail::copy_of(w13_scale_2);
      w.w2 = detail::copy_of(w2), w.w2_scale = detail::copy_of(w2_scale), w.w2_scale_2 = detail::copy_of(w2_scale_2);
      return w;
    }
  };

  static weights quantize(const ExpertWeights& f) {
    constexpr std::string_view what = "quant::nvfp4::quantize";
    f.validate(what);
    const ExpertShape& s = f.shape;
    weights w{ExpertStore::from(f), {}, {}, {}, {}, {}, {}};
    encode(f.w13, s.experts, w.w13, w.w13_scale, w.w13_scale_2);
    encode(f.w2, s.experts, w.w2, w.w2_scale, w.w2_scale_2);
    return w;
  }
  static void dequantize(const weights& w, index_t e, MatrixRef w13, MatrixRef w2) {
    decode(w.w13, w.w13_scale, w.w13_scale_2[e], e * w13.rows(), w13);
    decode(w.w2, w.w2_scale, w.w2_scale_2[e], e * w2.rows(), w2);
  }
  static void quantize_activation(std::span<float>) noexcept {}

 private:
  // m holds `experts` equal slices of rows; each slice gets its own scale_2.
  static void encode(const Matrix& m, index_t experts, std::vector<std::uint8_t>& packed,
                     std::vector<std::uint8_t>& scales, std::vector<float>& scale_2) {
    const index_t nb = blocks_per_row(m.cols()), rows = m.rows() / experts;
    packed.assign(static_cast<std::size_t>(m.rows() * nb * 8), 0);
    scales.assign(static_cast<std::size_t>(m.rows() * nb), 0);
    scale_2.assign(static_cast<std::size_t>(experts), 1.0f);
    for_each_part(experts, 1, [&](index_t e) {
      scale_2[e] = polymoe::quantize::nvfp4_scale_2(polymoe::quantize::amax(m.data() + e * rows * m.cols(),
                                                                            rows * m.cols()));
      for (index_t r = e * rows; r < (e + 1) * rows; ++r)
        polymoe::quantize::quantize_nvfp4_row(m.row(r).data(), m.cols(), scale_2[e], packed.data() + r * nb * 8,
                                              scales.data() + r * nb);
    });
  }
  static void decode(const std::vector<std::uint8_t>& packed, const std::vector<std::uint8_t>& scales, float scale_2,
                     index_t row0, MatrixRef out) {
    const index_t nb = blocks_per_row(out.cols());
    for (index_t r = 0; r < out.rows(); ++r)
      polymoe::quantize::dequantize_nvfp4_row(packed.data() + (row0 + r) * nb * 8, scales.data() + (row0 + r) * nb,
                                              scale_2, out.cols(), out.row(r).data());
  }
};

/// NVFP4 weights and NVFP4 activations (W4A4): each GEMM input row is quantized with the same
/// block-16 E2M1 + E4M3 scheme under a per-token dynamic global scale input_scale = amax(row) /
/// (6 · 448) (a static calibrated input_scale needs per-layer state that quantize_activation does
/// not carry). The product of the dequantized operands carries alpha = input_scale ·
/// weight_scale_2 exactly as a W4A4 GEMM applies it after accumulating e2m1 · e4m3 products.
struct nvfp4_w4a4 : nvfp4 {
  static constexpr std::string_view name = "nvfp4_w4a4";
  static void quantize_activation(std::span<float> row) noexcept { polymoe::quantize::fake_quantize_nvfp4(row); }
};

/// NVFP4 weights with 16-bit activations (W4A16, as FP4 weights run on hardware without FP4
/// tensor operations): each GEMM input row rounded to bf16 (round to nearest even), fp32
/// accumulation and top-k sum. The same weights as quant::nvfp4.
struct nvfp4_w4a16 : nvfp4 {
  static constexpr std::string_view name = "nvfp4_w4a16";
  static void quantize_activation(std::span<float> row) noexcept { codecs::round_to_bf16(row); }
};

/// ModelOpt NVFP4 tensors: per projection `weight` U8 [N, ceil(K/16)·8], `weight_scale` E4M3
/// [N, ceil(K/16)] (F8_E4M3 or U8) and `weight_scale_2` F32 [] (gate and up must share it).
template <>
struct checkpoint_layout<nvfp4::weights> {
  using W = nvfp4::weights;
  using scheme = nvfp4;
  static constexpr std::string_view name = "nvfp4", alias = "nvfp4";
  static constexpr std::string_view quantization_config =
      R"({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16})";
  static constexpr auto tensors = std::tuple{
      stored_tensor<&W::w13, &W::w2>{".weight", "", element::u8, {}, {nvfp4::block, 8}},
      stored_tensor<&W::w13_scale, &W::w2_scale>{".weight_scale", "", element::e4m3_scale, {}, {nvfp4::block, 1}},
      stored_tensor<&W::w13_scale_2, &W::w2_scale_2>{".weight_scale_2", "", element::f32_scale, {}, {}, true}};
};

}  // namespace polymoe::quant
