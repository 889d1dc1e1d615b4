#pragma once
// Adapters between dispatch formats (the seeds' pre-/post-permute). adapter<From, To> lets a kernel
// that runs format To serve a dispatcher that produces From:
//   d2 = a.pre(d, mlp)            DispatchOutput<From> -> DispatchOutput<To>
//   c2 = a.output(c, d2)          where the kernel writes, given the From-side combine input c
//   a.post(d, mlp, c2, c)         writes the From-side result into c
// Adapters own their buffers and keep them between calls.
#include <algorithm>
#include <vector>

#include <polymoe/core/formats.hpp>

namespace polymoe::kernels {

template <class From, class To>
struct adapter;  // only the pairs in pairing_table::adapters exist

template <>
struct adapter<format::ragged, format::standard> {
  DispatchOutput<format::standard> pre(const DispatchOutput<format::ragged>& d, const ExpertMlp&) { return d; }
  CombineInput<format::standard> output(CombineInput<format::ragged>& c, const DispatchOutput<format::standard>&) {
    return c;
  }
  void post(const DispatchOutput<format::ragged>&, const ExpertMlp&, const CombineInput<format::standard>&,
            CombineInput<format::ragged>&) noexcept {}
};

/// Masked rows as a standard batch: every valid row is a token with k = 1, weight 1; padding rows
/// get id -1. Zero-copy: the kernel reads the masked buffer and writes the masked output directly.
template <>
struct adapter<format::masked, format::standard> {
  IdMatrix ids;
  Matrix ones;
  DispatchOutput<format::standard> pre(const DispatchOutput<format::masked>& d, const ExpertMlp&) {
    const index_t rows = d.num_experts * d.capacity;
    ids.setConstant(rows, 1, -1);
    ones.setOnes(rows, 1);
    for (index_t e = 0; e < d.num_experts; ++e)
      for (index_t r = 0; r < d.masked_m[e]; ++r) ids(e * d.capacity + r, 0) = static_cast<std::int32_t>(e);
    return {d.hidden, ids, ones, d.num_experts};
  }
  CombineInput<format::standard> output(CombineInput<format::masked>& c, const DispatchOutput<format::standard>&) {
    return {c.out};
  }
  void post(const DispatchOutput<format::masked>&, const ExpertMlp&, const CombineInput<format::standard>&,
            CombineInput<format::masked>&) noexcept {}
};

/// A standard batch as masked rows: sort (token, slot) pairs by expert into padded rows with
/// capacity = the largest count, run, then sum each token's weighted rows back in slot order.
template <>
struct adapter<format::standard, format::masked> {
  Matrix in, out;
  std::vector<index_t> masked_m, row_of;
  DispatchOutput<format::masked> pre(const DispatchOutput<format::standard>& d, const ExpertMlp& mlp) {
    const index_t T = d.hidden.rows(), k = d.ids.cols(), E = d.num_experts, H = d.hidden.cols();
    masked_m.assign(static_cast<std::size_t>(E), 0);
    for (index_t t = 0; t < T; ++t)
      for (index_t j = 0; j < k; ++j)
        if (const auto id = d.ids(t, j); id >= 0) {
          require(id < E, "local expert id ", id, " at [", t, ", ", j, "] is outside [-1, ", E, ")");
          ++masked_m[id];
        }
    const index_t cap = std::max<index_t>(1, *std::max_element(masked_m.begin(), masked_m.end()));
    in.setZero(E * cap, H);
    row_of.assign(static_cast<std::size_t>(T * k), -1);
    std::vector<index_t> fill(static_cast<std::size_t>(E), 0);
    for (index_t t = 0; t < T; ++t)
      for (index_t j = 0; j < k; ++j)
        if (const auto id = d.ids(t, j); id >= 0) {
          const index_t row = id * cap + fill[id]++;
          row_of[t * k + j] = row;
          in.row(row) = mlp.weight_on_input ? (d.hidden.row(t) * d.weights(t, j)).eval() : d.hidden.row(t).eval();
        }
    return {in, masked_m, cap, E};
  }
  CombineInput<format::masked> output(CombineInput<format::standard>&, const DispatchOutput<format::masked>& d2) {
    out.setZero(d2.hidden.rows(), d2.hidden.cols());
    return {out};
  }
  void post(const DispatchOutput<format::standard>& d, const ExpertMlp& mlp, const CombineInput<format::masked>& c2,
            CombineInput<format::standard>& c) {
    const index_t T = d.hidden.rows(), k = d.ids.cols();
    for (index_t t = 0; t < T; ++t) {
      c.out.row(t).setZero();
      for (index_t j = 0; j < k; ++j)
        if (const index_t row = row_of[t * k + j]; row >= 0)
          c.out.row(t) += mlp.weight_on_input ? c2.out.row(row) : (c2.out.row(row) * d.weights(t, j)).eval();
    }
  }
};

}  // namespace polymoe::kernels
