#pragma once
#include <algorithm>
#include <limits>
#include <string_view>

#include <boost/mp11/list.hpp>

#include <polymoe/a2a/detail/mpi_base.hpp>
#include <polymoe/core/roles.hpp>

namespace polymoe::a2a {

/// All-gather the tokens (MPI_Allgatherv, fp32) so that every rank sees every token; each rank's
/// kernel computes one row per (token, slot) its own experts serve (standard format, k = 1), in
/// (source rank, token, slot) order, and each row goes back to the token's owner, which sums a
/// token's slots in slot order as a single process does (slot_exchange's combine). Every rank
/// ends with exactly its own tokens, bitwise as a single process computes them (as slot_exchange
/// says). Simple and good for small batches: every rank receives every token.
class mpi_allgather : public detail::slot_exchange {
 public:
  using a2a_concept = a2a_tag;
  using format = format::standard;
  static constexpr std::string_view name = "mpi_allgather";
  /// Tokens are all-gathered as fp32: no quantized activation wire.
  using wires = boost::mp11::mp_list<>;

  using slot_exchange::slot_exchange;

  DispatchOutput<format> dispatch(const MatrixCRef& hidden, const IdMatrixCRef& ids, const MatrixCRef& weights,
                                  const MoeConfig&) {
    const index_t T = hidden.rows(), H = hidden.cols(), k = ids.cols();
    int mine = static_cast<int>(T);
    tokens_.resize(static_cast<std::size_t>(size_));
    detail::mpi_check(MPI_Allgather(&mine, 1, MPI_INT, tokens_.data(), 1, MPI_INT, comm_), "MPI_Allgather");
    index_t total = 0;
    for (int c : tokens_) total += c;
    // MPI counts are int: every rank sees the same total, so all refuse together, before any exchange.
    require(total * std::max(H, k) <= std::numeric_limits<int>::max(), "mpi_allgather: ", total,
            " tokens over all ranks of ", std::max(H, k), " values each exceed an MPI count; use mpi_ragged");
    hidden_all_.resize(total, H);
    ids_all_.resize(total, k);
    weights_all_.resize(total, k);
    ids_local_ = ids;  // contiguous copies of the caller's views
    w_local_ = weights;
    h_local_ = hidden;
    gatherv(h_local_.data(), static_cast<int>(H), hidden_all_.data(), MPI_FLOAT);
    gatherv(ids_local_.data(), static_cast<int>(k), ids_all_.data(), MPI_INT32_T);
    gatherv(w_local_.data(), static_cast<int>(k), weights_all_.data(), MPI_FLOAT);
    dispatch_rows_ = T * (size_ - 1);
    dispatch_bytes_ = static_cast<std::size_t>(dispatch_rows_) * 4 * static_cast<std::size_t>(H + 2 * k);
    plan(ids_local_, rows_per::token);  // where this rank's slots are computed, and their order back

    // One kernel row per (token, slot) served here, in (source rank, token, slot) order: each
    // local expert sees its tokens in the order a single process gives them. The routing weight
    // goes to the kernel only where it multiplies the input; otherwise the owner applies it.
    const index_t El = local_experts_, first = rank_ * El;
    const auto local = [&](index_t g, index_t j) {
      const auto e = ids_all_(g, j);
      return e >= first && e < first + El;
    };
    recv_slot_counts_.assign(static_cast<std::size_t>(size_), 0);
    index_t n = 0;
    index_t g = 0;
    for (int s = 0; s < size_; ++s)
      for (int t = 0; t < tokens_[s]; ++t, ++g)
        for (index_t j = 0; j < k; ++j) recv_slot_counts_[s] += local(g, j);
    for (int c : recv_slot_counts_) n += c;
    hidden_.resize(n, H);
    slot_ids_1_.resize(n, 1);
    slot_w_.resize(n, 1);
    index_t row = 0;
    for (g = 0; g < total; ++g)
      for (index_t j = 0; j < k; ++j)
        if (local(g, j)) {
          hidden_.row(row) = hidden_all_.row(g);
          slot_ids_1_(row, 0) = static_cast<std::int32_t>(ids_all_(g, j) - first);
          slot_w_(row, 0) = weight_on_input_ ? weights_all_(g, j) : 1.0f;
          ++row;
        }
    return DispatchOutput<format>{hidden_, slot_ids_1_, slot_w_, El};
  }
  CombineInput<format> combine_input(const DispatchOutput<format>& d, MatrixRef) {
    partial_.resize(d.hidden.rows(), d.hidden.cols());
    return CombineInput<format>{partial_};
  }
  void combine(const CombineInput<format>&, MatrixRef out) {
    return_rows(partial_, back_);
    sum_slots(back_, w_local_, !weight_on_input_, out);
  }

 private:
  template <class T>
  void gatherv(const T* send, int width, T* recv, MPI_Datatype type) {
    const auto counts = scaled(tokens_, width);
    displacements(counts, displs_);
    detail::mpi_check(MPI_Allgatherv(send, counts[static_cast<std::size_t>(rank_)], type, recv, counts.data(),
                                     displs_.data(), type, comm_),
                      "MPI_Allgatherv");
  }
  std::vector<int> tokens_, displs_;
  Matrix hidden_all_, weights_all_, w_local_, h_local_;
  IdMatrix ids_all_, ids_local_;
  Matrix hidden_, slot_w_, partial_, back_;
  IdMatrix slot_ids_1_;
};

}  // namespace polymoe::a2a
