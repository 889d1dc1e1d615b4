#pragma once
// What the NCCL dispatchers share: MPI for the host's decisions (agreement, NCCL's unique id), an
// NCCL communicator for the rows, made when the layer connects unless given.
#include <memory>
#include <string_view>
#include <utility>

#include <polymoe/a2a/detail/mpi_base.hpp>
#include <polymoe/core/agree.hpp>
#include <polymoe/cuda/ep_exchange.hpp>

namespace polymoe::a2a::detail {

/// An NCCL communicator over the ranks of `m`'s MPI communicator, on the current device: rank 0
/// makes NCCL's unique id and broadcasts it over MPI. Collective.
inline std::shared_ptr<const cuda::nccl_comm> nccl_over_mpi(const mpi_base& m) {
  cuda::nccl_comm::unique_id id{};
  polymoe::detail::agree_on(m, [&] {
    if (m.rank() == 0) id = cuda::nccl_comm::new_id();
  });
  mpi_check(MPI_Bcast(id.data(), static_cast<int>(id.size()), MPI_BYTE, 0, m.comm()), "MPI_Bcast");
  return std::make_shared<const cuda::nccl_comm>(id, m.rank(), m.size());
}

class nccl_base : public mpi_base {
 public:
  /// The NCCL communicator (null before the layer is built): give it to the next layer's dispatcher.
  [[nodiscard]] const std::shared_ptr<const cuda::nccl_comm>& nccl() const noexcept { return nccl_; }

 protected:
  explicit nccl_base(MPI_Comm comm) : mpi_base(comm) {}
  nccl_base(std::shared_ptr<const cuda::nccl_comm> nccl, MPI_Comm comm, std::string_view who)
      : mpi_base(comm), nccl_(std::move(nccl)) {
    require(nccl_ != nullptr && nccl_->size() == size_ && nccl_->rank() == rank_, who,
            ": the NCCL communicator's ranks are not the MPI communicator's");
  }

  /// The communicator (made now unless given, collectively), then `setup` as one agreed step on
  /// `device`, the layer's.
  template <class Setup>
  void connect_on(int device, std::string_view who, Setup&& setup) {
    if (!nccl_) nccl_ = nccl_over_mpi(*this);
    polymoe::detail::agree_on(*this, [&] {
      require(nccl_->device() == device, who, ": the NCCL communicator is on device ", nccl_->device(),
              ", the layer on device ", device);
      setup();
    });
  }

  /// Collective: a setting that fixes the sequence or the sizes of the exchanges must be the same
  /// on every rank; every rank sees the range and refuses another alike.
  void agree_same(long long value, std::string_view what) const {
    long long range[2] = {value, -value};
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_LONG_LONG, MPI_MIN, comm_), "MPI_Allreduce");
    require(range[0] == -range[1], what, " differs between ranks (", range[0], " to ", -range[1], ")");
  }

  /// Collective: whether every rank runs on one host (MPI's shared-memory split holds them all).
  [[nodiscard]] bool on_one_host() const {
    int all = place_on_host(comm_, rank_).size == size_ ? 1 : 0;
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
    return all == 1;
  }

  std::shared_ptr<const cuda::nccl_comm> nccl_;
};

}  // namespace polymoe::a2a::detail
