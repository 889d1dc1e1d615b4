#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <polymoe/core/roles.hpp>
#include <polymoe/core/wire.hpp>
#include <polymoe/quantize/int8.hpp>
#include <polymoe/quant/checkpoint.hpp>

namespace polymoe::quant {

/// int8 W8A8: symmetric int8 weights with one fp32 scale per output channel (row of w13 / w2),
/// s = amax(row) / 127, W = q · s; activations quantized dynamically per token, s = amax / 127.
/// Rounding: nearest, ties to even, saturating to [-128, 127]. Any K (no blocks, no padding).
///
///   polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::int8_w8a8, polymoe::kernel::tbb_grouped> layer(cfg, w);
struct int8_w8a8 {
  using quant_concept = quant_tag;
  static constexpr std::string_view name = "int8_w8a8";
  using activation_wire = wire::int8_rows;  ///< dispatched rows travel as codes + one amax per token

  struct weights : ExpertStore {
    std::vector<std::int8_t> w13;  ///< [E·rows13, H]
    std::vector<std::int8_t> w2;   ///< [E·H, I]
    std::vector<float> w13_scale;  ///< [E·rows13] one per output channel
    std::vector<float> w2_scale;   ///< [E·H]

    void validate(std::string_view what) const {
      const ExpertShape& s = shape_;
      check_sizes(what, {{"w13", w13.size(), count(s.rows13(), s.hidden)},
                         {"w2", w2.size(), count(s.hidden, s.intermediate)},
                         {"w13_scale", w13_scale.size(), count(s.rows13(), 1)},
                         {"w2_scale", w2_scale.size(), count(s.hidden, 1)}});
    }

    /// From stored tensors (no requantization): w13 [E, rows13, H] and w2 [E, H, I] int8, scales
    /// w13_scale [E, rows13] and w2_scale [E, H] (W = q · s); biases as ExpertWeights holds them.
    static weights from_checkpoint(const ExpertShape& s, const tensor_view<std::int8_t>& w13,
                                   const tensor_view<float>& w13_scale, const tensor_view<std::int8_t>& w2,
                                   const tensor_view<float>& w2_scale, Matrix b13 = {}, Matrix b2 = {}) {
      constexpr std::string_view what = "quant::int8_w8a8::weights::from_checkpoint";
      weights w{detail::checked_store(s, what, std::move(b13), std::move(b2)), {}, {}, {}, {}};
      detail::require_shape(w13, what, "w13", {s.experts, s.rows13(), s.hidden});
      detail::require_shape(w2, what, "w2", {s.experts, s.hidden, s.intermediate});
      detail::require_shape(w13_scale, what, "w13_scale", {s.experts, s.rows13()});
      detail::require_shape(w2_scale, what, "w2_scale", {s.experts, s.hidden});
      detail::copy_codes_and_scales(w, what, w13, w13_scale, w2, w2_scale);
      return w;
    }
  };

  static weights quantize(const ExpertWeights& f) {
    return detail::quantize_codes_and_scales<weights>(f, "quant::int8_w8a8::quantize", encode);
  }
  static void dequantize(const weights& w, index_t e, MatrixRef w13, MatrixRef w2) {
    const ExpertShape& s = w.shape_;
    decode(w.w13.data(), w.w13_scale.data(), e * s.rows13(), w13);
    decode(w.w2.data(), w.w2_scale.data(), e * s.hidden, w2);
  }
  static void quantize_activation(std::span<float> row) noexcept { polymoe::quantize::fake_quantize_int8(row); }

 private:
  static void encode(const Matrix& m, std::vector<std::int8_t>& q, std::vector<float>& scale) {
    q.resize(static_cast<std::size_t>(m.size()));
    scale.resize(static_cast<std::size_t>(m.rows()));
    for_each_part(m.rows(), 64, [&](index_t r) {
      const float* x = m.row(r).data();
      scale[r] = polymoe::quantize::int8_scale(polymoe::quantize::amax(x, m.cols()));
      polymoe::quantize::quantize_int8(x, m.cols(), scale[r], q.data() + r * m.cols());
    });
  }
  static void decode(const std::int8_t* q, const float* scale, index_t row0, MatrixRef out) {
    for (index_t r = 0; r < out.rows(); ++r)
      for (index_t c = 0; c < out.cols(); ++c)
        out(r, c) = static_cast<float>(q[(row0 + r) * out.cols() + c]) * scale[row0 + r];
  }
};

/// W8A8 int8 tensors: per projection `weight` I8 [N, K] and `weight_scale` F32 [N, 1] (one per
/// output channel).
template <>
struct checkpoint_layout<int8_w8a8::weights> {
  using W = int8_w8a8::weights;
  using scheme = int8_w8a8;
  static constexpr std::string_view name = "int8", alias = "int8_w8a8";
  static constexpr std::string_view quantization_config = R"({"quant_method": "w8a8_int8"})";
  static constexpr auto tensors = std::tuple{
      stored_tensor<&W::w13, &W::w2>{".weight", "", element::i8},
      stored_tensor<&W::w13_scale, &W::w2_scale>{".weight_scale", "", element::f32_scale, {}, {0, 1}}};
};

}  // namespace polymoe::quant
