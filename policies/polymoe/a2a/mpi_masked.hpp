#pragma once
#include <string_view>

#include <polymoe/a2a/detail/mpi_base.hpp>
#include <polymoe/core/roles.hpp>

namespace polymoe::a2a {

/// DeepEP "low-latency" semantics over MPI: every local expert has a fixed capacity; rows received
/// for it land in a padded buffer [E_local, capacity, H] with masked_m[e] valid rows. A batch that
/// would exceed the capacity on any rank is an error on every rank (naming the limit and the
/// constructor argument that raises it), decided before any token moves; nothing is dropped.
/// Rows travel per (token, slot), quantized when the quant scheme quantizes its activations.
class mpi_masked : public detail::slot_exchange {
 public:
  using a2a_concept = a2a_tag;
  using format = format::masked;
  static constexpr std::string_view name = "mpi_masked";

  /// `capacity`: rows per local expert per forward, summed over all source ranks.
  explicit mpi_masked(index_t capacity = 256, MPI_Comm comm = MPI_COMM_WORLD)
      : slot_exchange(comm), capacity_(capacity) {}

  void configure(const MoeConfig& cfg) {
    require(capacity_ >= 1, "mpi_masked: capacity must be >= 1, got ", capacity_);
    slot_exchange::configure(cfg);
    // The fixed buffers are allocated here, inside the layer's agreed build step: a rank that
    // cannot hold them fails with the others, not alone in the middle of a forward's exchange.
    buffer_.setZero(local_experts_ * capacity_, cfg.hidden);
    results_.setZero(local_experts_ * capacity_, cfg.hidden);
  }

  [[nodiscard]] index_t capacity() const noexcept { return capacity_; }

  template <class Wire = wire::fp32>
  DispatchOutput<format> dispatch(const MatrixCRef& hidden, const IdMatrixCRef& ids, const MatrixCRef& weights,
                                  const MoeConfig&, Wire = {}) {
    const index_t El = local_experts_, H = hidden.cols();
    plan(ids, rows_per::slot);
    weights_ = weights;
    per_expert_.resize(static_cast<std::size_t>(size_ * El));
    detail::mpi_check(MPI_Alltoall(expert_counts_.data(), static_cast<int>(El), MPI_INT, per_expert_.data(),
                           static_cast<int>(El), MPI_INT, comm_),
              "MPI_Alltoall");
    masked_m_.assign(static_cast<std::size_t>(El), 0);
    for (int src = 0; src < size_; ++src)
      for (index_t e = 0; e < El; ++e) masked_m_[e] += per_expert_[src * El + e];
    std::string overflow;
    for (index_t e = 0; e < El && overflow.empty(); ++e)
      if (masked_m_[e] > capacity_)
        overflow = polymoe::detail::concat("mpi_masked: local expert ", e, " (global ", rank_ * El + e, ") received ",
                                           masked_m_[e], " rows but the capacity is ", capacity_,
                                           "; raise it with mpi_masked(capacity) or use mpi_ragged");
    agree(overflow);

    send<Wire>(hidden, weights, received_);
    if (buffer_.rows() != El * capacity_ || buffer_.cols() != H) buffer_.setZero(El * capacity_, H);
    place_.resize(static_cast<std::size_t>(received_.rows()));
    expert_fill_.assign(static_cast<std::size_t>(El), 0);
    for (index_t row = 0; row < received_.rows(); ++row) {  // arrival order: source, expert, token, slot
      const std::int32_t e = slot_ids_[static_cast<std::size_t>(row)];
      const index_t dst = e * capacity_ + expert_fill_[e]++;
      buffer_.row(dst) = received_.row(row);
      place_[row] = dst;
    }
    return DispatchOutput<format>{buffer_, masked_m_, capacity_, El};
  }
  CombineInput<format> combine_input(const DispatchOutput<format>& d, MatrixRef) {
    if (results_.rows() != d.hidden.rows() || results_.cols() != d.hidden.cols())
      results_.setZero(d.hidden.rows(), d.hidden.cols());
    return CombineInput<format>{results_};
  }
  void combine(const CombineInput<format>&, MatrixRef out) {
    gathered_.resize(static_cast<index_t>(place_.size()), results_.cols());
    for (std::size_t i = 0; i < place_.size(); ++i) gathered_.row(static_cast<index_t>(i)) = results_.row(place_[i]);
    return_rows(gathered_, back_);
    sum_slots(back_, weights_, !weight_on_input_, out);
  }

 private:
  index_t capacity_;
  std::vector<int> per_expert_;
  std::vector<index_t> masked_m_, place_, expert_fill_;
  Matrix weights_, received_, buffer_, results_, gathered_, back_;
};

}  // namespace polymoe::a2a
