#pragma once
// What the MPI dispatchers share: the communicator, the check that MoeConfig's expert parallelism
// matches it, collective agreement on errors, and the per-slot token exchange of the ragged and
// masked dispatchers. Requires MPI (the polymoe::mpi CMake target); MPI_Init is the caller's.
#include <mpi.h>

#include <bit>
#include <string>
#include <vector>

#include <polymoe/core/config.hpp>
#include <polymoe/core/error.hpp>
#include <polymoe/core/formats.hpp>

namespace polymoe::a2a::detail {

inline void mpi_check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw error(std::string("MPI call ") + what + " failed");
}

class mpi_base {
 public:
  explicit mpi_base(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    require(initialized, "MPI dispatchers need MPI_Init to have been called");
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  /// Called once by the layer (collectively, through agree): the config must describe this communicator.
  void configure(const MoeConfig& cfg) {
    require(cfg.ep_size == size_ && cfg.ep_rank == rank_, "MoeConfig says ep_rank ", cfg.ep_rank, " of ep_size ",
            cfg.ep_size, ", but this is rank ", rank_, " of an MPI communicator of size ", size_);
    local_experts_ = cfg.local_experts();
    weight_on_input_ = cfg.router_weight_on_input;
  }

  /// Every rank calls this with its own failure ("" if none). If any rank failed, every rank throws
  /// the same polymoe::error: the lowest failing rank's message, prefixed with that rank.
  void agree(const std::string& failure) const {
    int mine = failure.empty() ? size_ : rank_, first = size_;
    mpi_check(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
    if (first == size_) return;
    std::string msg = failure;
    int len = static_cast<int>(msg.size());
    mpi_check(MPI_Bcast(&len, 1, MPI_INT, first, comm_), "MPI_Bcast");
    msg.resize(static_cast<std::size_t>(len));
    mpi_check(MPI_Bcast(msg.data(), len, MPI_CHAR, first, comm_), "MPI_Bcast");
    if (msg.rfind("polymoe: ", 0) == 0) msg.erase(0, 9);
    throw error(polymoe::detail::concat("rank ", first, " of ", size_, ": ", msg));
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_; }

 protected:
  static void displacements(const std::vector<int>& counts, std::vector<int>& displs, int scale = 1) {
    displs.resize(counts.size());
    int acc = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) displs[i] = acc, acc += counts[i] * scale;
  }
  static std::vector<int> scaled(const std::vector<int>& counts, int scale) {
    std::vector<int> s(counts);
    for (int& c : s) c *= scale;
    return s;
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  index_t local_experts_ = 0;
  bool weight_on_input_ = false;
};

/// The per-slot exchange: every (token, slot) pair travels as one row to the rank that owns its
/// expert and its result comes back as one row, which the owner sums in slot order. That makes the
/// result bitwise equal to a single-process run for kernels whose per-row result does not depend on
/// the batch (the reference kernel), at the price of sending a token once per slot rather than once
/// per destination rank.
class slot_exchange : public mpi_base {
 public:
  using mpi_base::mpi_base;

 protected:
  /// Orders the local (token, slot) pairs by destination rank, then local expert, then (t, j); fills
  /// send_counts_ (rows per rank) and expert_counts_ (rows per rank and local expert).
  void plan(const IdMatrixCRef& ids) {
    const index_t T = ids.rows(), k = ids.cols(), El = local_experts_;
    expert_counts_.assign(static_cast<std::size_t>(size_ * El), 0);
    for (index_t t = 0; t < T; ++t)
      for (index_t j = 0; j < k; ++j) ++expert_counts_[ids(t, j)];  // global id = rank * El + local
    std::vector<index_t> fill(expert_counts_.size() + 1, 0);
    for (std::size_t g = 0; g < expert_counts_.size(); ++g) fill[g + 1] = fill[g] + expert_counts_[g];
    send_slot_.resize(static_cast<std::size_t>(T * k));
    position_.resize(static_cast<std::size_t>(T * k));
    for (index_t t = 0; t < T; ++t)
      for (index_t j = 0; j < k; ++j) {
        const index_t p = fill[ids(t, j)]++;
        send_slot_[p] = t * k + j;
        position_[t * k + j] = p;
      }
    send_counts_.assign(static_cast<std::size_t>(size_), 0);
    for (int d = 0; d < size_; ++d)
      for (index_t e = 0; e < El; ++e) send_counts_[d] += expert_counts_[d * El + e];
  }

  /// Sends the planned rows (hidden rows, scaled by the weight when it multiplies the input).
  void send_rows(const MatrixCRef& hidden, const MatrixCRef& weights, Matrix& received) {
    const index_t k = weights.cols(), H = hidden.cols();
    const int h = static_cast<int>(H);
    send_buf_.resize(static_cast<index_t>(send_slot_.size()), H);
    for (std::size_t p = 0; p < send_slot_.size(); ++p) {
      const index_t t = send_slot_[p] / k, j = send_slot_[p] % k;
      if (weight_on_input_)
        send_buf_.row(static_cast<index_t>(p)) = hidden.row(t) * weights(t, j);
      else
        send_buf_.row(static_cast<index_t>(p)) = hidden.row(t);
    }
    recv_counts_.assign(static_cast<std::size_t>(size_), 0);
    mpi_check(MPI_Alltoall(send_counts_.data(), 1, MPI_INT, recv_counts_.data(), 1, MPI_INT, comm_), "MPI_Alltoall");
    index_t n = 0;
    for (int c : recv_counts_) n += c;
    received.resize(n, H);
    alltoallv_rows(send_buf_.data(), send_counts_, received.data(), recv_counts_, h);
  }

  /// Returns result rows (in received order) to their owners; `back` gets them in planned order.
  void return_rows(const Matrix& results, Matrix& back) {
    back.resize(static_cast<index_t>(send_slot_.size()), results.cols());
    alltoallv_rows(results.data(), recv_counts_, back.data(), send_counts_, static_cast<int>(results.cols()));
  }

  /// out[t] = sum over j, in slot order, of the returned row (times the weight when asked).
  void sum_slots(const Matrix& back, const MatrixCRef& weights, bool weighted, MatrixRef out) const {
    const index_t T = out.rows(), k = weights.cols();
    for (index_t t = 0; t < T; ++t) {
      out.row(t).setZero();
      for (index_t j = 0; j < k; ++j) {
        const index_t p = position_[t * k + j];
        if (weighted)
          out.row(t) += (back.row(p) * weights(t, j)).eval();
        else
          out.row(t) += back.row(p);
      }
    }
  }

  void alltoallv_rows(const float* send, const std::vector<int>& scount, float* recv, const std::vector<int>& rcount,
                      int width) {
    const auto sc = scaled(scount, width), rc = scaled(rcount, width);
    displacements(sc, sdispl_);
    displacements(rc, rdispl_);
    mpi_check(MPI_Alltoallv(send, sc.data(), sdispl_.data(), MPI_FLOAT, recv, rc.data(), rdispl_.data(), MPI_FLOAT,
                            comm_),
              "MPI_Alltoallv");
  }

  std::vector<int> expert_counts_, send_counts_, recv_counts_, sdispl_, rdispl_;
  std::vector<index_t> send_slot_, position_;
  Matrix send_buf_, back_;
};

}  // namespace polymoe::a2a::detail
