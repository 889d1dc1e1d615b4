#pragma once
// The reference expert computation: plain loops over the scheme's exact (dequantized) weights,
// double accumulation inside each dot product, fp32 everywhere else. Slow on purpose and obviously
// correct: every other kernel is tested against it.
#include <span>
#include <vector>

#include <polymoe/core/activation.hpp>
#include <polymoe/core/error.hpp>
#include <polymoe/core/expert_weights.hpp>
#include <polymoe/core/formats.hpp>

namespace polymoe::kernels {

/// One expert's dequantized weights.
struct DenseExpert {
  Matrix w13;  ///< [rows13, H]
  Matrix w2;   ///< [H, I]
  const float* b13 = nullptr;
  const float* b2 = nullptr;
};

template <class Q>
void load_dense_expert(const typename Q::weights& w, index_t e, DenseExpert& out) {
  const ExpertShape s = w.shape();
  out.w13.resize(s.rows13(), s.hidden);
  out.w2.resize(s.hidden, s.intermediate);
  Q::dequantize(w, e, out.w13, out.w2);
  out.b13 = w.b13_of(e);
  out.b2 = w.b2_of(e);
}

/// y[H] = expert(x[H]); x is quantized in place by the scheme (the caller's copy).
template <class Q>
void reference_expert_row(const ExpertShape& s, const DenseExpert& w, const ActivationParams& act, std::span<float> x,
                          std::vector<float>& pre, std::vector<float>& h, float* y) {
  const index_t H = s.hidden, I = s.intermediate, R = s.rows13();
  pre.resize(static_cast<std::size_t>(R));
  h.resize(static_cast<std::size_t>(I));
  Q::quantize_activation(x);
  for (index_t r = 0; r < R; ++r) {
    double acc = 0.0;
    for (index_t c = 0; c < H; ++c) acc += static_cast<double>(w.w13(r, c)) * x[c];
    pre[r] = static_cast<float>(acc) + (w.b13 ? w.b13[r] : 0.0f);
  }
  apply_activation(act, pre.data(), h.data(), I);
  Q::quantize_activation(h);
  for (index_t r = 0; r < H; ++r) {
    double acc = 0.0;
    for (index_t j = 0; j < I; ++j) acc += static_cast<double>(w.w2(r, j)) * h[j];
    y[r] = static_cast<float>(acc) + (w.b2 ? w.b2[r] : 0.0f);
  }
}

/// Standard format: out[t] = sum over slots j (in slot order, fp32) of w[t,j] · expert_{id[t,j]}(x[t]).
template <class Q>
void reference_standard(const DispatchOutput<format::standard>& d, const typename Q::weights& w, const ExpertMlp& mlp,
                        MatrixRef out) {
  const ExpertShape s = w.shape();
  const index_t T = d.hidden.rows(), k = d.ids.cols(), H = s.hidden;
  require(d.hidden.cols() == H, "reference kernel: hidden has ", d.hidden.cols(), " columns, weights expect ", H);
  require(out.rows() == T && out.cols() == H, "reference kernel: output is [", out.rows(), ", ", out.cols(),
          "], expected [", T, ", ", H, "]");
  Matrix slots = Matrix::Zero(T * k, H);
  DenseExpert dense;
  std::vector<float> x(static_cast<std::size_t>(H)), pre, h;
  for (index_t e = 0; e < s.experts; ++e) {
    bool loaded = false;
    for (index_t t = 0; t < T; ++t)
      for (index_t j = 0; j < k; ++j) {
        if (d.ids(t, j) != e) continue;
        if (!loaded) load_dense_expert<Q>(w, e, dense), loaded = true;
        const float wt = d.weights(t, j);
        for (index_t c = 0; c < H; ++c) x[c] = mlp.weight_on_input ? d.hidden(t, c) * wt : d.hidden(t, c);
        float* y = slots.row(t * k + j).data();
        reference_expert_row<Q>(s, dense, mlp.activation, x, pre, h, y);
        if (!mlp.weight_on_input)
          for (index_t c = 0; c < H; ++c) y[c] *= wt;
      }
  }
  for (index_t t = 0; t < T; ++t) {
    out.row(t).setZero();
    for (index_t j = 0; j < k; ++j) {
      const auto id = d.ids(t, j);
      require(id >= -1 && id < s.experts, "reference kernel: local expert id ", id, " at [", t, ", ", j,
              "] is outside [-1, ", s.experts, ")");
      if (id >= 0) out.row(t) += slots.row(t * k + j);
    }
  }
}

/// Masked format: each valid row's own expert output, unweighted.
template <class Q>
void reference_masked(const DispatchOutput<format::masked>& d, const typename Q::weights& w, const ExpertMlp& mlp,
                      MatrixRef out) {
  const ExpertShape s = w.shape();
  const index_t H = s.hidden, cap = d.capacity;
  require(d.num_experts == s.experts && static_cast<index_t>(d.masked_m.size()) == s.experts,
          "reference kernel: masked input has ", d.masked_m.size(), " experts, weights have ", s.experts);
  require(d.hidden.rows() == s.experts * cap && out.rows() == s.experts * cap && d.hidden.cols() == H &&
              out.cols() == H,
          "reference kernel: masked buffers must be [E*capacity, H] = [", s.experts * cap, ", ", H, "]");
  DenseExpert dense;
  std::vector<float> x(static_cast<std::size_t>(H)), pre, h;
  for (index_t e = 0; e < s.experts; ++e) {
    const index_t m = d.masked_m[e];
    require(m >= 0 && m <= cap, "reference kernel: masked_m[", e, "]=", m, " outside [0, capacity=", cap, "]");
    if (m > 0) load_dense_expert<Q>(w, e, dense);
    for (index_t r = 0; r < m; ++r) {
      const index_t row = e * cap + r;
      for (index_t c = 0; c < H; ++c) x[c] = d.hidden(row, c);
      reference_expert_row<Q>(s, dense, mlp.activation, x, pre, h, out.row(row).data());
    }
  }
}

}  // namespace polymoe::kernels
