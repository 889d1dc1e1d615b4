#pragma once
#include <span>
#include <string_view>

#include <polymoe/core/roles.hpp>
#include <polymoe/quant/store.hpp>

namespace polymoe::quant {

/// fp32 weights and activations: no rounding anywhere (the fixtures' own precision).
struct fp32 {
  using quant_concept = quant_tag;
  static constexpr std::string_view name = "fp32";

  struct weights : ExpertStore {
    Matrix w13;  ///< [E·rows13, H]
    Matrix w2;   ///< [E·H, I]

    void validate(std::string_view what) const { check_expert_matrices(shape_, what, w13, w2, b13, b2); }
  };

  static weights quantize(const ExpertWeights& f) {
    f.validate("quant::fp32::quantize");
    return weights{ExpertStore::from(f), f.w13, f.w2};
  }
  static void dequantize(const weights& w, index_t e, MatrixRef w13, MatrixRef w2) {
    const auto& s = w.shape_;
    w13 = w.w13.middleRows(e * s.rows13(), s.rows13());
    w2 = w.w2.middleRows(e * s.hidden, s.hidden);
  }
  static void quantize_activation(std::span<float>) noexcept {}
};

}  // namespace polymoe::quant
