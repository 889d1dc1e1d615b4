#pragma once
#include <string_view>

#include <polymoe/a2a/detail/mpi_base.hpp>
#include <polymoe/core/roles.hpp>

namespace polymoe::a2a {

/// DeepEP "normal" semantics over MPI: counts are exchanged, then every (token, slot) row travels to
/// the rank owning its expert (MPI_Alltoallv); the kernel sees the rows it received with their local
/// expert ids and per-local-expert counts (ragged format); combine brings each row's weighted result
/// back and sums it in slot order, so every rank ends with exactly its own tokens, in its own order.
class mpi_ragged : public detail::slot_exchange {
 public:
  using a2a_concept = a2a_tag;
  using format = format::ragged;
  static constexpr std::string_view name = "mpi_ragged";

  using slot_exchange::slot_exchange;

  DispatchOutput<format> dispatch(const MatrixCRef& hidden, const IdMatrixCRef& ids, const MatrixCRef& weights,
                                  const MoeConfig&) {
    plan(ids);
    weights_ = weights;
    send_rows(hidden, weights, recv_hidden_);
    // Each received row has one slot: its local expert and its weight (1 when it scaled the input).
    const index_t n = recv_hidden_.rows(), El = local_experts_;
    recv_ids_.resize(n, 1);
    counts_.assign(static_cast<std::size_t>(El), 0);
    recv_weights_.resize(n, 1);
    // Rows arrive grouped by source rank, then by local expert: rebuild ids from the counts.
    std::vector<int> per_expert(static_cast<std::size_t>(size_ * El));
    detail::mpi_check(MPI_Alltoall(expert_counts_.data(), static_cast<int>(El), MPI_INT, per_expert.data(), static_cast<int>(El),
                           MPI_INT, comm_),
              "MPI_Alltoall");
    index_t row = 0;
    for (int src = 0; src < size_; ++src)
      for (index_t e = 0; e < El; ++e)
        for (int i = 0; i < per_expert[src * El + e]; ++i) recv_ids_(row++, 0) = static_cast<std::int32_t>(e);
    for (index_t e = 0; e < El; ++e)
      for (int src = 0; src < size_; ++src) counts_[e] += per_expert[src * El + e];
    recv_weights_.setOnes();  // weights are applied by the owner in combine, in slot order
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
  Matrix recv_hidden_, recv_weights_, partial_;
  IdMatrix recv_ids_;
  std::vector<index_t> counts_;
  Matrix weights_;  // the local tokens' routing weights, applied in combine
};

}  // namespace polymoe::a2a
