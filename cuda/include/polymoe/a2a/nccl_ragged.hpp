#pragma once
// a2a::nccl_ragged — DeepEP's normal mode between GPUs over NCCL, in CUDA memory (CMake target
// polymoe::nccl; a row of polymoe::nccl_table, <polymoe/nccl.hpp>). One process per GPU, started
// by mpirun: MPI carries what the host decides (NCCL's unique id, the agreement on errors and on
// the layers' fingerprint), NCCL the rows.
//
// Each token travels once to every rank that owns one of its experts, with the local ids and
// routing weights of the slots it serves there, its row as the caller passed it (fp32 or bf16):
// the counts first (the host waits for them, then sizes the rows' exchange), then the rows, one
// group of ncclSend/ncclRecv. The kernel sees each received token once, with the local ids of its
// slots here (-1 for the others) and the per-expert counts (ragged format), and writes each slot's
// own result to its row of the returned rows (CombineInput::pair_rows); each goes back to the
// token's rank, which sums its slots in slot order. With a kernel set so that a row's result does
// not depend on the rows batched with it (kernel::cuda with a fixed TileChoice), every rank's
// output is bitwise what one GPU computes for its tokens.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <boost/mp11/list.hpp>

#include <polymoe/a2a/detail/mpi_base.hpp>
#include <polymoe/core/formats.hpp>
#include <polymoe/core/memory_space.hpp>
#include <polymoe/core/roles.hpp>
#include <polymoe/cuda/ep_exchange.hpp>

namespace polymoe::a2a {

namespace detail {
/// An NCCL communicator over the ranks of `m`'s MPI communicator, on the current device: rank 0
/// makes NCCL's unique id and broadcasts it over MPI. Collective.
inline std::shared_ptr<const cuda::nccl_comm> nccl_over_mpi(const mpi_base& m) {
  cuda::nccl_comm::unique_id id{};
  std::string failure;
  if (m.rank() == 0) try {
      id = cuda::nccl_comm::new_id();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  m.agree(failure);
  mpi_check(MPI_Bcast(id.data(), static_cast<int>(id.size()), MPI_BYTE, 0, m.comm()), "MPI_Bcast");
  return std::make_shared<const cuda::nccl_comm>(id, m.rank(), m.size());
}
}  // namespace detail

class nccl_ragged : public detail::mpi_base {
 public:
  using a2a_concept = a2a_tag;
  using format = format::ragged;
  using memory_spaces = boost::mp11::mp_list<space::cuda>;
  static constexpr std::string_view name = "nccl_ragged";

  /// Over `comm`'s ranks, one GPU each: the NCCL communicator is made (collectively, on the
  /// layer's device) when the layer is built.
  explicit nccl_ragged(MPI_Comm comm = MPI_COMM_WORLD) : mpi_base(comm) {}
  /// Over an NCCL communicator already made (another layer's: nccl_ragged(other.nccl())), whose
  /// ranks are `comm`'s.
  nccl_ragged(std::shared_ptr<const cuda::nccl_comm> nccl, MPI_Comm comm = MPI_COMM_WORLD)
      : mpi_base(comm), nccl_(std::move(nccl)) {
    require(nccl_ != nullptr && nccl_->size() == size_ && nccl_->rank() == rank_,
            "nccl_ragged: the NCCL communicator's ranks are not the MPI communicator's");
  }

  /// Called by the layer, inside its agreed build step.
  void configure(const MoeConfig& cfg) {
    mpi_base::configure(cfg);
    top_k_ = cfg.top_k();
  }
  /// Called by the layer once every rank has built its own (collective): the NCCL communicator
  /// (made now unless given) and this layer's exchange, on `device`.
  void connect(int device) {
    if (!nccl_) nccl_ = detail::nccl_over_mpi(*this);
    std::string failure;
    try {
      require(nccl_->device() == device, "nccl_ragged: the NCCL communicator is on device ", nccl_->device(),
              ", the layer on device ", device);
      exchange_.emplace(nccl_, local_experts_);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    agree(failure);
  }
  /// Grows what the plan of `tokens` tokens needs (the layer calls it inside its agreed checks).
  void reserve(index_t tokens) { exchange().reserve_plan(tokens, top_k_); }

  DispatchOutput<format, space::cuda> dispatch(const device_view& hidden, const device_view& ids,
                                               const device_view& weights, const MoeConfig&, cuda_stream stream) {
    device_view planned = ids;
    if (planned.rows == 0) planned.cols = planned.row_stride = top_k_;  // any width when there are no tokens
    cuda::ep_exchange& x = exchange();
    x.plan(planned, hidden.cols, hidden.type, stream);  // collective; a refusal is every rank's
    std::string failure;
    try {
      x.reserve_rows();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    agree(failure);
    const cuda::ep_exchange::received r = x.exchange(hidden, planned, weights, stream);
    pair_rows_ = r.pair_rows;
    DispatchOutput<format, space::cuda> d{{r.hidden, r.ids, r.weights, local_experts_, stream}, {}};
    d.counts = r.counts;
    return d;
  }
  CombineInput<format, space::cuda> combine_input(const DispatchOutput<format, space::cuda>& d, const device_view&) {
    return {{exchange().results(), d.stream}, pair_rows_};
  }
  void combine(const CombineInput<format, space::cuda>& c, const device_view& out) { exchange().combine(out, c.stream); }

  /// The NCCL communicator (null before the layer is built): give it to the next layer's dispatcher.
  [[nodiscard]] const std::shared_ptr<const cuda::nccl_comm>& nccl() const noexcept { return nccl_; }
  /// Bytes this rank sent to other ranks in the last dispatch (records) and combine (fp32 rows).
  [[nodiscard]] std::size_t dispatch_bytes() const noexcept { return exchange_ ? exchange_->dispatch_bytes() : 0; }
  [[nodiscard]] std::size_t combine_bytes() const noexcept { return exchange_ ? exchange_->combine_bytes() : 0; }

 private:
  cuda::ep_exchange& exchange() {
    require(exchange_.has_value(), "nccl_ragged: not connected (a layer connects its dispatcher when it is built)");
    return *exchange_;
  }

  std::shared_ptr<const cuda::nccl_comm> nccl_;
  std::optional<cuda::ep_exchange> exchange_;
  device_view pair_rows_;
  index_t top_k_ = 1;
};

}  // namespace polymoe::a2a
