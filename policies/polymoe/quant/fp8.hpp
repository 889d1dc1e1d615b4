#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <polymoe/core/roles.hpp>
#include <polymoe/core/wire.hpp>
#include <polymoe/quantize/fp8.hpp>
#include <polymoe/quant/checkpoint.hpp>

namespace polymoe::quant {

/// fp8 E4M3FN weights with one fp32 scale per expert per projection (w13, gate and up together,
/// and w2): s = amax / 448, W = e4m3(q) · s. Activations: dynamic per-token scale amax / 448, each
/// GEMM input row quantized to E4M3 and back (W8A8). Any K (no blocks, no padding).
///
///   polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::fp8, polymoe::kernel::reference> layer(cfg, w);
struct fp8 {
  using quant_concept = quant_tag;
  static constexpr std::string_view name = "fp8";
  using activation_wire = wire::e4m3<0>;  ///< dispatched rows travel as codes + one amax per token

  struct weights : ExpertStore {
    std::vector<std::uint8_t> w13;  ///< [E·rows13, H] E4M3 codes
    std::vector<std::uint8_t> w2;   ///< [E·H, I]
    std::vector<float> w13_scale;   ///< [E]
    std::vector<float> w2_scale;    ///< [E]

    void validate(std::string_view what) const {
      const ExpertShape& s = shape_;
      check_sizes(what, {{"w13", w13.size(), count(s.rows13(), s.hidden)},
                         {"w2", w2.size(), count(s.hidden, s.intermediate)},
                         {"w13_scale", w13_scale.size(), count(1, 1)},
                         {"w2_scale", w2_scale.size(), count(1, 1)}});
    }

    /// From stored tensors (no requantization): w13 [E, rows13, H] and w2 [E, H, I] E4M3 codes,
    /// scales [E] (W = q · s); biases as ExpertWeights holds them, or empty.
    static weights from_checkpoint(const ExpertShape& s, const tensor_view<std::uint8_t>& w13,
                                   const tensor_view<float>& w13_scale, const tensor_view<std::uint8_t>& w2,
                                   const tensor_view<float>& w2_scale, Matrix b13 = {}, Matrix b2 = {}) {
      constexpr std::string_view what = "quant::fp8::weights::from_checkpoint";
      weights w{detail::checked_store(s, what, std::move(b13), std::move(b2)), {}, {}, {}, {}};
      detail::require_shape(w13, what, "w13", {s.experts, s.rows13(), s.hidden});
      detail::require_shape(w2, what, "w2", {s.experts, s.hidden, s.intermediate});
      detail::require_shape(w13_scale, what, "w13_scale", {s.experts});
      detail::require_shape(w2_scale, what, "w2_scale", {s.experts});
      detail::require_scales(w13_scale.data, what, "w13_scale");
      detail::require_scales(w2_scale.data, what, "w2_scale");
      detail::require_elements(element::e4m3, w13.data, what, "w13");
      detail::require_elements(element::e4m3, w2.data, what, "w2");
      w.w13 = detail::copy_of(w13), w.w2 = detail::copy_of(w2);
      w.w13_scale = detail::copy_of(w13_scale), w.w2_scale = detail::copy_of(w2_scale);
      return w;
    }
  };

  static weights quantize(const ExpertWeights& f) {
    constexpr std::string_view what = "quant::fp8::quantize";
    f.validate(what);
    const ExpertShape& s = f.shape;
    const index_t n13 = s.rows13() * s.hidden, n2 = s.hidden * s.intermediate;
    weights w{ExpertStore::from(f), std::vector<std::uint8_t>(static_cast<std::size_t>(s.experts * n13)),
              std::vector<std::uint8_t>(static_cast<std::size_t>(s.experts * n2)),
              std::vector<float>(static_cast<std::size_t>(s.experts)),
              std::vector<float>(static_cast<std::size_t>(s.experts))};
    namespace kq = polymoe::quantize;
    for_each_part(s.experts, 1, [&](index_t e) {
      const float* a = f.w13.data() + e * n13;
      const float* b = f.w2.data() + e * n2;
      w.w13_scale[e] = kq::e4m3_scale(kq::amax(a, n13));
      w.w2_scale[e] = kq::e4m3_scale(kq::amax(b, n2));
      kq::quantize_e4m3(a, n13, w.w13_scale[e], w.w13.data() + e * n13);
      kq::quantize_e4m3(b, n2, w.w2_scale[e], w.w2.data() + e * n2);
    });
    return w;
  }
  static void dequantize(const weights& w, index_t e, MatrixRef w13, MatrixRef w2) {
    const ExpertShape& s = w.shape_;
    const index_t n13 = s.rows13() * s.hidden, n2 = s.hidden * s.intermediate;
    for (index_t r = 0; r < s.rows13(); ++r)
      polymoe::quantize::dequantize_e4m3(w.w13.data() + e * n13 + r * s.hidden, s.hidden, w.w13_scale[e],
                                         w13.row(r).data());
    for (index_t r = 0; r < s.hidden; ++r)
      polymoe::quantize::dequantize_e4m3(w.w2.data() + e * n2 + r * s.intermediate, s.intermediate, w.w2_scale[e],
                                         w2.row(r).data());
  }
  static void quantize_activation(std::span<float> row) noexcept {
    polymoe::quantize::fake_quantize_e4m3(row, static_cast<index_t>(row.size()));
  }
};

}  // namespace polymoe::quant
