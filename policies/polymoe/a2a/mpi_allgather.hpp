#pragma once
#include <algorithm>
#include <limits>
#include <string_view>

#include <polymoe/a2a/detail/mpi_base.hpp>
#include <polymoe/core/roles.hpp>

namespace polymoe::a2a {

/// All-gather the tokens (MPI_Allgatherv), let every rank compute its own experts' share of every
/// token (standard format, slots owned elsewhere carry -1), then reduce-scatter the partial sums
/// back (MPI_Reduce_scatter). Simple and good for small batches; the cross-rank sum adds partial
/// results in MPI's order, so it is not bitwise equal to one process (fp32 reassociation of at most
/// ep_size partial sums: see docs and the MPI tests' bound).
class mpi_allgather : public detail::mpi_base {
 public:
  using a2a_concept = a2a_tag;
  using format = format::standard;
  static constexpr std::string_view name = "mpi_allgather";

  using mpi_base::mpi_base;

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
    hidden_.resize(total, H);
    ids_.resize(total, k);
    weights_.resize(total, k);
    ids_local_ = ids;    // contiguous copies of the caller's views
    w_local_ = weights;
    h_local_ = hidden;
    gatherv(h_local_.data(), static_cast<int>(H), hidden_.data(), MPI_FLOAT);
    gatherv(ids_local_.data(), static_cast<int>(k), ids_.data(), MPI_INT32_T);
    gatherv(w_local_.data(), static_cast<int>(k), weights_.data(), MPI_FLOAT);
    const index_t El = local_experts_, first = rank_ * El;
    for (index_t i = 0; i < ids_.size(); ++i) {
      const auto g = ids_.data()[i];
      ids_.data()[i] = (g >= first && g < first + El) ? static_cast<std::int32_t>(g - first) : -1;
    }
    return DispatchOutput<format>{hidden_, ids_, weights_, El};
  }
  CombineInput<format> combine_input(const DispatchOutput<format>& d, MatrixRef) {
    partial_.resize(d.hidden.rows(), d.hidden.cols());
    return CombineInput<format>{partial_};
  }
  void combine(const CombineInput<format>&, MatrixRef out) {
    const auto counts = scaled(tokens_, static_cast<int>(partial_.cols()));
    const bool contiguous = out.rows() <= 1 || out.outerStride() == out.cols();  // else stage, then copy
    if (!contiguous) staged_.resize(out.rows(), out.cols());
    detail::mpi_check(MPI_Reduce_scatter(partial_.data(), contiguous ? out.data() : staged_.data(), counts.data(),
                                         MPI_FLOAT, MPI_SUM, comm_),
                      "MPI_Reduce_scatter");
    if (!contiguous) out = staged_;
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
  Matrix hidden_, weights_, partial_, w_local_, h_local_, staged_;
  IdMatrix ids_, ids_local_;
};

}  // namespace polymoe::a2a
