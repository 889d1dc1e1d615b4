#pragma once
// fp32 expert weights in polymoe's canonical layout, what every quant scheme quantizes from.
//
//   w13 [E·rows13, H]  expert e's rows start at e·rows13; gated: rows [0, I) gate, [I, 2I) up
//   w2  [E·H, I]       expert e's rows start at e·H (down projection, y = W2 · h)
//   b13 [E, rows13]    optional (MoeConfig::expert_bias)
//   b2  [E, H]         optional
//
// Checkpoints with other layouts (GPT-OSS interleaved, transposed stacks) are converted by the
// helpers below or by the loaders; kernels re-lay weights for themselves at prepare time.
#include <cmath>
#include <limits>
#include <optional>
#include <string_view>

#include <polymoe/core/config.hpp>

namespace polymoe {

/// The shape facts every weight store (fp32 or quantized) can state about itself.
struct ExpertShape {
  index_t experts = 0;
  index_t hidden = 0;
  index_t intermediate = 0;
  bool gated = true;
  bool bias = false;
  [[nodiscard]] index_t rows13() const noexcept { return gated ? 2 * intermediate : intermediate; }
  friend bool operator==(const ExpertShape&, const ExpertShape&) = default;
};

inline std::ostream& operator<<(std::ostream& os, const ExpertShape& s) {
  return os << "{experts=" << s.experts << ", hidden=" << s.hidden << ", intermediate=" << s.intermediate
            << ", gated=" << s.gated << ", bias=" << s.bias << "}";
}

/// Throws polymoe::error naming the first non-finite entry of `m` (`what: name[r, c] = v is not finite`).
/// Weights must be finite: a NaN or infinity would poison every token routed to the expert, a quantizer
/// has no code for it, and a block scale computed over it would spoil the whole block.
inline void require_finite(const Eigen::Ref<const Matrix>& m, std::string_view what, std::string_view name) {
  // |v| <= FLT_MAX fails for NaN and both infinities; or-ed with no early exit, the loop vectorizes
  // (Eigen's allFinite took one value at a time: most of a quantizer's time on large stores)
  unsigned bad = 0;
  for (index_t r = 0; r < m.rows(); ++r) {
    const float* x = m.data() + r * m.outerStride();
    for (index_t c = 0; c < m.cols(); ++c)
      bad |= static_cast<unsigned>(!(std::fabs(x[c]) <= std::numeric_limits<float>::max()));
  }
  if (bad == 0) [[likely]]
    return;
  for (index_t r = 0; r < m.rows(); ++r)
    for (index_t c = 0; c < m.cols(); ++c)
      require(std::isfinite(m(r, c)), what, ": ", name, "[", r, ", ", c, "] = ", m(r, c), " is not finite");
}

/// Throws polymoe::error unless b13 [E, rows13] and b2 [E, H] match `s` (both empty when !s.bias).
inline void check_biases(const ExpertShape& s, std::string_view what, const Matrix& b13, const Matrix& b2) {
  require(s.experts > 0 && s.hidden > 0 && s.intermediate > 0, what, ": empty expert shape ", s);
  if (s.bias) {
    require(b13.rows() == s.experts && b13.cols() == s.rows13(), what, ": b13 is [", b13.rows(), ", ", b13.cols(),
            "], expected [", s.experts, ", ", s.rows13(), "]");
    require(b2.rows() == s.experts && b2.cols() == s.hidden, what, ": b2 is [", b2.rows(), ", ", b2.cols(),
            "], expected [", s.experts, ", ", s.hidden, "]");
    require_finite(b13, what, "b13");
    require_finite(b2, what, "b2");
  } else {
    require(b13.size() == 0 && b2.size() == 0, what, ": biases given but the shape says bias=false");
  }
}

/// Throws polymoe::error unless w13 [E·rows13, H], w2 [E·H, I] and the biases match `s` (the
/// canonical fp32 layout, held by ExpertWeights and by quant::fp32's store) and are finite.
inline void check_expert_matrices(const ExpertShape& s, std::string_view what, const Matrix& w13, const Matrix& w2,
                                  const Matrix& b13, const Matrix& b2) {
  require(s.experts > 0 && s.hidden > 0 && s.intermediate > 0, what, ": empty expert shape ", s);
  require(w13.rows() == s.experts * s.rows13() && w13.cols() == s.hidden, what, ": w13 is [", w13.rows(), ", ",
          w13.cols(), "], expected [", s.experts * s.rows13(), ", ", s.hidden, "]");
  require(w2.rows() == s.experts * s.hidden && w2.cols() == s.intermediate, what, ": w2 is [", w2.rows(), ", ",
          w2.cols(), "], expected [", s.experts * s.hidden, ", ", s.intermediate, "]");
  check_biases(s, what, b13, b2);
  require_finite(w13, what, "w13");
  require_finite(w2, what, "w2");
}

struct ExpertWeights {
  ExpertShape shape;
  Matrix w13;
  Matrix w2;
  Matrix b13;
  Matrix b2;

  ExpertWeights() = default;
  ExpertWeights(ExpertShape s) : shape(s) {
    w13 = Matrix::Zero(s.experts * s.rows13(), s.hidden);
    w2 = Matrix::Zero(s.experts * s.hidden, s.intermediate);
    if (s.bias) {
      b13 = Matrix::Zero(s.experts, s.rows13());
      b2 = Matrix::Zero(s.experts, s.hidden);
    }
  }

  [[nodiscard]] auto w13_of(index_t e) { return w13.middleRows(e * shape.rows13(), shape.rows13()); }
  [[nodiscard]] auto w13_of(index_t e) const { return w13.middleRows(e * shape.rows13(), shape.rows13()); }
  [[nodiscard]] auto w2_of(index_t e) { return w2.middleRows(e * shape.hidden, shape.hidden); }
  [[nodiscard]] auto w2_of(index_t e) const { return w2.middleRows(e * shape.hidden, shape.hidden); }

  /// Throws polymoe::error when the matrices disagree with `shape` (`what` names the tensor set).
  void validate(std::string_view what) const { check_expert_matrices(shape, what, w13, w2, b13, b2); }
};

/// Everything a layer holds besides its dispatcher and kernel, over some expert store
/// (ExpertWeights for fp32 input, or a quant scheme's `weights` for pre-quantized checkpoints).
template <class Store>
struct BasicMoeWeights {
  Store experts;                ///< the routed experts this rank owns (E_local of them)
  std::optional<Store> shared;  ///< shared expert as a one-expert store (intermediate = shared_intermediate)
  Matrix shared_gate;           ///< [1, H] when MoeConfig::shared_expert_gate
  Matrix router_weight;         ///< [E, H] (optional: lets forward(hidden) compute the logits)
  Vector router_bias;           ///< [E] or empty
};
using MoeWeights = BasicMoeWeights<ExpertWeights>;

/// GPT-OSS stores gate_up as [E, H, 2I] with gate in even and up in odd columns, down as [E, I, H].
/// Returns canonical w13 rows (gate block then up block) for one expert, from `gate_up` [H, 2I].
inline Matrix deinterleave_gate_up(const Eigen::Ref<const Matrix>& gate_up_h_by_2i) {
  const index_t two_i = gate_up_h_by_2i.cols(), inter = two_i / 2;
  require(two_i % 2 == 0, "deinterleave_gate_up: odd column count ", two_i);
  Matrix w13(two_i, gate_up_h_by_2i.rows());
  for (index_t j = 0; j < inter; ++j) {
    w13.row(j) = gate_up_h_by_2i.col(2 * j).transpose();
    w13.row(inter + j) = gate_up_h_by_2i.col(2 * j + 1).transpose();
  }
  return w13;
}
/// Bias counterpart of deinterleave_gate_up: [2I] interleaved -> [gate | up].
inline Matrix deinterleave_bias(const Eigen::Ref<const Matrix>& b_1_by_2i) {
  const index_t inter = b_1_by_2i.cols() / 2;
  Matrix out(1, 2 * inter);
  for (index_t j = 0; j < inter; ++j) {
    out(0, j) = b_1_by_2i(0, 2 * j);
    out(0, inter + j) = b_1_by_2i(0, 2 * j + 1);
  }
  return out;
}

}  // namespace polymoe
