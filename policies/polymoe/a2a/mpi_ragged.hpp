#pragma once
#include <string_view>

#include <polymoe/a2a/detail/mpi_base.hpp>
#include <polymoe/core/roles.hpp>

namespace polymoe::a2a {

/// DeepEP "normal" semantics over MPI: counts are exchanged, then each token travels once to every
/// rank that owns one of its experts (MPI_Alltoallv), with the local expert ids of the slots it
/// serves there (-1 for the others) — as quantized codes when the quant scheme quantizes its
/// activations (fp8_block: E4M3 with per-128 amaxes; fp8, int8_w8a8: per token), 4x fewer bytes
/// than fp32. The kernel sees one row per (received token, local expert) with per-local-expert
/// counts (ragged format); combine brings each slot's result back and sums it in slot order, so
/// every rank ends with exactly its own tokens, in its own order, bitwise as a single process
/// computes them. When the routing weight multiplies the input, every slot's row differs and
/// travels on its own.
class mpi_ragged : public detail::slot_exchange {
 public:
  using a2a_concept = a2a_tag;
  using format = format::ragged;
  static constexpr std::string_view name = "mpi_ragged";

  using slot_exchange::slot_exchange;

  template <class Wire = wire::fp32>
  DispatchOutput<format> dispatch(const MatrixCRef& hidden, const IdMatrixCRef& ids, const MatrixCRef& weights,
                                  const MoeConfig&, Wire = {}) {
    plan(ids, weight_on_input_ ? rows_per::slot : rows_per::token);
    weights_ = weights;
    send<Wire>(hidden, weights, recv_hidden_);
    const index_t n = recv_hidden_.rows(), El = local_experts_;
    recv_ids_.resize(n, 1);
    counts_.assign(static_cast<std::size_t>(El), 0);
    for (index_t i = 0; i < n; ++i) {
      recv_ids_(i, 0) = slot_ids_[static_cast<std::size_t>(i)];
      ++counts_[slot_ids_[static_cast<std::size_t>(i)]];
    }
    recv_weights_.setOnes(n, 1);  // weights are applied by the owner in combine, in slot order
    DispatchOutput<format> d{{recv_hidden_, recv_ids_, recv_weights_, El}, {}};
    d.counts = counts_;
    return d;
  }
  CombineInput<format> combine_input(const DispatchOutput<format>& d, MatrixRef) {
    partial_.resize(d.hidden.rows(), d.hidden.cols());
    return CombineInput<format>{{partial_}};
  }
  void combine(const CombineInput<format>&, MatrixRef out) {
    return_rows(partial_, back_);
    sum_slots(back_, weights_, !weight_on_input_, out);
  }

 private:
  Matrix recv_hidden_, recv_weights_, partial_, back_;
  IdMatrix recv_ids_;
  std::vector<index_t> counts_;
  Matrix weights_;  // the local tokens' routing weights, applied in combine
};

}  // namespace polymoe::a2a
