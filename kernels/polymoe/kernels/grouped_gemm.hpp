#pragma once
// Grouped expert GEMMs with oneTBB and Eigen: tokens are grouped by expert, each group's rows are
// split into chunks, and all chunks of all experts run in one parallel loop; every (token, slot)
// result lands in its own row so the final fp32 top-k sum runs in slot order, independent of the
// thread count.
#include <algorithm>
#include <span>
#include <vector>

#include <tbb/blocked_range.h>
#include <polymoe/kernels/parallel.hpp>

#include <polymoe/core/activation.hpp>
#include <polymoe/core/error.hpp>
#include <polymoe/core/expert_weights.hpp>
#include <polymoe/core/formats.hpp>

namespace polymoe::kernels {

/// Expert weights as fp32 matrices, dequantized once from any scheme at prepare time.
struct DenseExperts {
  ExpertShape shape;
  Matrix w13;  ///< [E·rows13, H]
  Matrix w2;   ///< [E·H, I]
  Matrix b13;
  Matrix b2;
};

template <class Q>
DenseExperts dequantize_experts(const typename Q::weights& w) {
  const ExpertShape s = w.shape();
  DenseExperts d{s, Matrix(s.experts * s.rows13(), s.hidden), Matrix(s.experts * s.hidden, s.intermediate), w.b13,
                 w.b2};
  for (index_t e = 0; e < s.experts; ++e)
    Q::dequantize(w, e, d.w13.middleRows(e * s.rows13(), s.rows13()), d.w2.middleRows(e * s.hidden, s.hidden));
  return d;
}

/// (token, slot) pairs grouped by local expert: slots[offsets[e] .. offsets[e+1]) hold t·k + j.
struct ExpertGroups {
  std::vector<index_t> offsets;
  std::vector<index_t> slots;
};

inline void group_by_expert(const IdMatrixCRef& ids, index_t num_experts, ExpertGroups& g) {
  const index_t T = ids.rows(), k = ids.cols();
  g.offsets.assign(static_cast<std::size_t>(num_experts + 1), 0);
  for (index_t t = 0; t < T; ++t)
    for (index_t j = 0; j < k; ++j) {
      const auto id = ids(t, j);
      require(id >= -1 && id < num_experts, "local expert id ", id, " at [", t, ", ", j, "] is outside [-1, ",
              num_experts, ")");
      if (id >= 0) ++g.offsets[id + 1];
    }
  for (index_t e = 0; e < num_experts; ++e) g.offsets[e + 1] += g.offsets[e];
  g.slots.resize(static_cast<std::size_t>(g.offsets[num_experts]));
  std::vector<index_t> fill(g.offsets.begin(), g.offsets.end() - 1);
  for (index_t t = 0; t < T; ++t)
    for (index_t j = 0; j < k; ++j)
      if (const auto id = ids(t, j); id >= 0) g.slots[fill[id]++] = t * k + j;
}

/// Rows of a chunk of n rows as the GEMMs run it: Eigen sums a row of X · Wᵀ in one order wherever
/// the row sits only within a full group of its kernel's nr rows, and only above the size where it
/// turns to a coefficient-wise product (EIGEN_GEMM_TO_COEFFBASED_THRESHOLD, on the sum of the three
/// sizes); a chunk padded with zero rows to both gives each row the same bits in any batch, so the
/// kernel is batch-invariant (the layer's shared expert relies on it).
inline index_t padded_chunk_rows(index_t n, index_t H, index_t R, index_t I) noexcept {
  constexpr index_t group = Eigen::internal::gebp_traits<float, float>::nr;
  index_t rows = (n + group - 1) / group * group;
  while (rows + H + R < EIGEN_GEMM_TO_COEFFBASED_THRESHOLD || rows + I + H < EIGEN_GEMM_TO_COEFFBASED_THRESHOLD)
    rows += group;
  return rows;
}

/// out[t] = sum_j w[t,j] · expert_{id[t,j]}(x[t]) with Eigen GEMMs per (expert, row chunk).
template <class Q>
void grouped_standard(const DispatchOutput<format::standard>& d, const DenseExperts& w, const ExpertMlp& mlp,
                      MatrixRef out, index_t chunk_rows = 64) {
  const ExpertShape& s = w.shape;
  const index_t T = d.hidden.rows(), k = d.ids.cols(), H = s.hidden, I = s.intermediate, R = s.rows13();
  require(d.hidden.cols() == H, "tbb_grouped kernel: hidden has ", d.hidden.cols(), " columns, weights expect ", H);
  require(out.rows() == T && out.cols() == H, "tbb_grouped kernel: output is [", out.rows(), ", ", out.cols(),
          "], expected [", T, ", ", H, "]");
  ExpertGroups g;
  group_by_expert(d.ids, s.experts, g);

  struct Chunk {
    index_t expert, begin, end;
  };
  std::vector<Chunk> chunks;
  for (index_t e = 0; e < s.experts; ++e)
    for (index_t b = g.offsets[e]; b < g.offsets[e + 1]; b += chunk_rows)
      chunks.push_back({e, b, std::min(b + chunk_rows, g.offsets[e + 1])});

  Matrix slots(T * k, H);
  kernels::parallel_for(tbb::blocked_range<std::size_t>(0, chunks.size(), 1), [&](const auto& range) {
    Matrix X, G, A, Y;
    for (std::size_t c = range.begin(); c != range.end(); ++c) {
      const auto [e, begin, end] = chunks[c];
      const index_t n = end - begin, rows = padded_chunk_rows(n, H, R, I);
      X.resize(rows, H);
      X.bottomRows(rows - n).setZero();
      for (index_t i = 0; i < n; ++i) {
        const index_t slot = g.slots[begin + i];
        const float wt = d.weights(slot / k, slot % k);
        if (mlp.weight_on_input)
          X.row(i) = d.hidden.row(slot / k) * wt;
        else
          X.row(i) = d.hidden.row(slot / k);
        Q::quantize_activation(std::span<float>(X.row(i).data(), static_cast<std::size_t>(H)));
      }
      G.resize(rows, R);
      G.noalias() = X * w.w13.middleRows(e * R, R).transpose();
      if (s.bias) G.rowwise() += w.b13.row(e);
      A.resize(rows, I);
      A.bottomRows(rows - n).setZero();
      for (index_t i = 0; i < n; ++i) {
        apply_activation(mlp.activation, G.row(i).data(), A.row(i).data(), I);
        Q::quantize_activation(std::span<float>(A.row(i).data(), static_cast<std::size_t>(I)));
      }
      Y.resize(rows, H);
      Y.noalias() = A * w.w2.middleRows(e * H, H).transpose();
      if (s.bias) Y.rowwise() += w.b2.row(e);
      for (index_t i = 0; i < n; ++i) {
        const index_t slot = g.slots[begin + i];
        const float wt = mlp.weight_on_input ? 1.0f : d.weights(slot / k, slot % k);
        slots.row(slot) = Y.row(i) * wt;
      }
    }
  });
  kernels::parallel_for(tbb::blocked_range<index_t>(0, T, 16), [&](const auto& range) {
    for (index_t t = range.begin(); t != range.end(); ++t) {
      out.row(t).setZero();
      for (index_t j = 0; j < k; ++j)
        if (d.ids(t, j) >= 0) out.row(t) += slots.row(t * k + j);
    }
  });
}

}  // namespace polymoe::kernels
