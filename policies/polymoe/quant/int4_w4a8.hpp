#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <polymoe/core/roles.hpp>
#include <polymoe/core/wire.hpp>
#include <polymoe/quantize/int4.hpp>
#include <polymoe/quant/checkpoint.hpp>
#include <polymoe/quant/int8_w8a8.hpp>

namespace polymoe::quant {

/// int4 W4A8: symmetric int4 weights in groups of 32 along k (the input dimension), one fp32
/// scale per group, s = amax(group) / 7, W = q · s, q in [-8, 7]; activations as quant::int8_w8a8
/// quantizes them (per token, s = amax / 127, int8), so the integer kernels run both on the same
/// int8 products, the weights unpacked from nibbles to int8 just before them. Rounding: nearest,
/// ties to even, saturating. Group 32 as GGUF Q4_0 and KTransformers' AMXINT4 (a finer grid than
/// 128 for the error of 4-bit codes; 32 k is half a tile row of AMX and 8 quads of VNNI). Scales
/// fp32, not bf16: the scale used to quantize is the scale stored (no second rounding that could
/// push |x / s| past 7), and the kernels multiply by it without widening; that costs 0.5 bit per
/// weight over bf16 scales (5 bits against 4.5). K not a multiple of 32: the last group is padded
/// with code 0. Layout per projection (N output rows, K inputs): `weight` [E, N, ceil(K/32)·16]
/// packed bytes (two's-complement nibbles, element 2i in the low nibble of byte i) and
/// `weight_scale` [E, N, ceil(K/32)] fp32. Exact definition: docs/quantization.md#int4_w4a8.
///
///   polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::int4_w4a8, polymoe::kernel::tiled> layer(cfg, w);
struct int4_w4a8 {
  using quant_concept = quant_tag;
  static constexpr std::string_view name = "int4_w4a8";
  using activation_wire = int8_w8a8::activation_wire;  ///< the activations are int8_w8a8's
  static constexpr index_t group = polymoe::quantize::int4_group;

  [[nodiscard]] static constexpr index_t groups_per_row(index_t K) noexcept {
    return polymoe::quantize::blocks_of(K, group);
  }
  /// Packed bytes of a row of K codes.
  [[nodiscard]] static constexpr index_t row_bytes(index_t K) noexcept {
    return groups_per_row(K) * polymoe::quantize::int4_group_bytes;
  }

  struct weights : ExpertStore {
    std::vector<std::uint8_t> w13;  ///< [E, rows13, ceil(H/32)·16] packed codes, gate rows then up rows
    std::vector<float> w13_scale;   ///< [E, rows13, ceil(H/32)]
    std::vector<std::uint8_t> w2;   ///< [E, H, ceil(I/32)·16]
    std::vector<float> w2_scale;    ///< [E, H, ceil(I/32)]

    void validate(std::string_view what) const {
      const ExpertShape& s = shape_;
      check_sizes(what, {{"w13", w13.size(), count(s.rows13(), row_bytes(s.hidden))},
                         {"w13_scale", w13_scale.size(), count(s.rows13(), groups_per_row(s.hidden))},
                         {"w2", w2.size(), count(s.hidden, row_bytes(s.intermediate))},
                         {"w2_scale", w2_scale.size(), count(s.hidden, groups_per_row(s.intermediate))}});
    }

    /// From stored tensors (no requantization), shapes as the members above; a negative or
    /// non-finite scale is rejected (every byte is a valid pair of codes).
    static weights from_checkpoint(const ExpertShape& s, const tensor_view<std::uint8_t>& w13,
                                   const tensor_view<float>& w13_scale, const tensor_view<std::uint8_t>& w2,
                                   const tensor_view<float>& w2_scale, Matrix b13 = {}, Matrix b2 = {}) {
      constexpr std::string_view what = "quant::int4_w4a8::weights::from_checkpoint";
      weights w{detail::checked_store(s, what, std::move(b13), std::move(b2)), {}, {}, {}, {}};
      const index_t R = s.rows13(), gH = groups_per_row(s.hidden), gI = groups_per_row(s.intermediate);
      detail::require_shape(w13, what, "w13", {s.experts, R, row_bytes(s.hidden)});
      detail::require_shape(w13_scale, what, "w13_scale", {s.experts, R, gH});
      detail::require_shape(w2, what, "w2", {s.experts, s.hidden, row_bytes(s.intermediate)});
      detail::require_shape(w2_scale, what, "w2_scale", {s.experts, s.hidden, gI});
      detail::copy_codes_and_scales(w, what, w13, w13_scale, w2, w2_scale);
      return w;
    }
  };

  static weights quantize(const ExpertWeights& f) {
    return detail::quantize_codes_and_scales<weights>(f, "quant::int4_w4a8::quantize", encode);
  }
  static void dequantize(const weights& w, index_t e, MatrixRef w13, MatrixRef w2) {
    decode(w.w13, w.w13_scale, e * w13.rows(), w13);
    decode(w.w2, w.w2_scale, e * w2.rows(), w2);
  }
  static void quantize_activation(std::span<float> row) noexcept { int8_w8a8::quantize_activation(row); }

 private:
  static void encode(const Matrix& m, std::vector<std::uint8_t>& packed, std::vector<float>& scales) {
    const index_t nb = row_bytes(m.cols()), ng = groups_per_row(m.cols());
    packed.assign(static_cast<std::size_t>(m.rows() * nb), 0);
    scales.assign(static_cast<std::size_t>(m.rows() * ng), 0.0f);
    for_each_part(m.rows(), 64, [&](index_t r) {
      polymoe::quantize::quantize_int4_row(m.row(r).data(), m.cols(), packed.data() + r * nb, scales.data() + r * ng);
    });
  }
  static void decode(const std::vector<std::uint8_t>& packed, const std::vector<float>& scales, index_t row0,
                     MatrixRef out) {
    const index_t nb = row_bytes(out.cols()), ng = groups_per_row(out.cols());
    for (index_t r = 0; r < out.rows(); ++r)
      polymoe::quantize::dequantize_int4_row(packed.data() + (row0 + r) * nb, scales.data() + (row0 + r) * ng,
                                             out.cols(), out.row(r).data());
  }
};

/// int4 W4A8 tensors: per projection `weight` U8 [N, ceil(K/32)·16] (two codes a byte) and
/// `weight_scale` F32 [N, ceil(K/32)] (one per group of 32 inputs).
template <>
struct checkpoint_layout<int4_w4a8::weights> {
  using W = int4_w4a8::weights;
  using scheme = int4_w4a8;
  static constexpr std::string_view name = "int4", alias = "int4_w4a8";
  static constexpr std::string_view quantization_config =
      R"({"quant_method": "polymoe_int4_w4a8", "bits": 4, "group_size": 32, "sym": true})";
  static constexpr auto tensors = std::tuple{
      stored_tensor<&W::w13, &W::w2>{".weight", "", element::u8, {}, {int4_w4a8::group, 16}},
      stored_tensor<&W::w13_scale, &W::w2_scale>{".weight_scale", "", element::f32_scale, {}, {int4_w4a8::group, 1}}};
};

}  // namespace polymoe::quant
