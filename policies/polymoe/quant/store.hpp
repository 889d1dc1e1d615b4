#pragma once
// What every quant scheme's weight store shares: its shape and fp32 biases (no scheme quantizes
// biases). Schemes derive their `weights` from ExpertStore and add the quantized matrices.
#include <polymoe/core/expert_weights.hpp>

namespace polymoe::quant {

struct ExpertStore {
  ExpertShape shape_;
  Matrix b13;  ///< [E, rows13] or empty
  Matrix b2;   ///< [E, H] or empty

  [[nodiscard]] ExpertShape shape() const noexcept { return shape_; }
  [[nodiscard]] const float* b13_of(index_t e) const noexcept { return shape_.bias ? b13.row(e).data() : nullptr; }
  [[nodiscard]] const float* b2_of(index_t e) const noexcept { return shape_.bias ? b2.row(e).data() : nullptr; }

  static ExpertStore from(const ExpertWeights& f) { return ExpertStore{f.shape, f.b13, f.b2}; }
};

}  // namespace polymoe::quant
