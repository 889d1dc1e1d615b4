#pragma once
// a2a::nccl_masked — DeepEP's low-latency mode between GPUs over NCCL, in CUDA memory (CMake
// target polymoe::nccl; a row of polymoe::nccl_table, <polymoe/nccl.hpp>). One process per GPU,
// started by mpirun, as a2a::nccl_ragged.
//
// Every exchange has a fixed size, set when the layer is built: each rank sends every rank
// max_tokens records (a token's row where it has a slot there, and its local ids there) and gets
// back max_tokens · top_k float32 rows. No step of a forward waits for the device, so a CUDA
// graph can hold one; the price is that the blocks move whole whatever the batch (size
// max_tokens to the batches run). The received slots fill each local expert's `capacity` rows,
// in (source rank, token, slot) order, with masked_m the valid rows of each (masked format); the
// kernel writes each row's own unweighted result, which goes back to its token's rank, weighted
// there and summed in slot order: with a kernel whose rows do not depend on the rows batched
// with them (kernel::cuda with a fixed TileChoice), every rank's output is bitwise what one GPU
// computes.
//
// The default capacity, ranks · max_tokens, holds any routing. With a smaller one, an expert
// sent more rows than it holds is an error, never a silent drop: that forward's output is NaN on
// every rank, and every rank throws the same error (a2a::collective_error) at the next forward,
// or at once from the layer's host-memory forward, which waits for the device (a forward replayed
// from a graph runs no host code: the next one outside it throws).
#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

#include <boost/mp11/list.hpp>

#include <polymoe/a2a/detail/nccl_base.hpp>
#include <polymoe/core/formats.hpp>
#include <polymoe/core/memory_space.hpp>
#include <polymoe/core/roles.hpp>
#include <polymoe/cuda/ep_exchange.hpp>

namespace polymoe::a2a {

class nccl_masked : public detail::nccl_base {
 public:
  using a2a_concept = a2a_tag;
  using format = format::masked;
  using memory_spaces = boost::mp11::mp_list<space::cuda>;
  static constexpr std::string_view name = "nccl_masked";

  /// `max_tokens`: the most tokens a rank passes a forward (DeepEP's
  /// num_max_dispatch_tokens_per_rank). `capacity`: the rows of each local expert, from all ranks
  /// together (0: ranks · max_tokens). `rows`: the element type of the hidden rows passed,
  /// float32 or bfloat16 (what the wire and the masked buffer carry). The same on every rank.
  explicit nccl_masked(index_t max_tokens = 128, index_t capacity = 0, element_type rows = element_type::bf16,
                       MPI_Comm comm = MPI_COMM_WORLD)
      : nccl_base(comm), max_tokens_(max_tokens), capacity_(capacity), rows_(rows) {}
  /// Over an NCCL communicator already made (another layer's dispatcher's nccl()).
  nccl_masked(std::shared_ptr<const cuda::nccl_comm> nccl, index_t max_tokens = 128, index_t capacity = 0,
              element_type rows = element_type::bf16, MPI_Comm comm = MPI_COMM_WORLD)
      : nccl_base(std::move(nccl), comm, name), max_tokens_(max_tokens), capacity_(capacity), rows_(rows) {}

  /// Called by the layer, inside its agreed build step.
  void configure(const MoeConfig& cfg) {
    mpi_base::configure(cfg);
    require(!cfg.router_weight_on_input, "nccl_masked: the masked format computes each row unweighted; a layer with "
                                         "router_weight_on_input needs nccl_ragged");
    require(max_tokens_ >= 1, "nccl_masked: max_tokens must be >= 1, got ", max_tokens_);
    require(capacity_ >= 0, "nccl_masked: capacity must be >= 0 (0: ranks x max_tokens), got ", capacity_);
    require(rows_ == element_type::f32 || rows_ == element_type::bf16, "nccl_masked: rows must be float32 or "
                                                                       "bfloat16, got ", to_string(rows_));
    shape_ = {local_experts_, cfg.top_k(), cfg.hidden, max_tokens_, capacity_ > 0 ? capacity_ : size_ * max_tokens_,
              rows_};
  }
  /// Called by the layer once every rank has built its own (collective): the NCCL communicator
  /// and this layer's exchange, every buffer of it, on `device`.
  void connect(int device) {
    // other sizes elsewhere would be other exchanges: refused before any buffer is made
    agree_same(max_tokens_, "nccl_masked: max_tokens");
    agree_same(shape_.capacity, "nccl_masked: capacity");
    agree_same(element_bytes(rows_), "nccl_masked: the bytes of a row's element");
    connect_on(device, name, [&] {
      x_.reset();
      x_.emplace(nccl_, shape_);
    });
  }
  /// Called by the layer inside its agreed checks of a forward's input.
  void check_input(const device_view& hidden) const {
    require(hidden.rows <= max_tokens_, "nccl_masked: ", hidden.rows, " tokens, more than max_tokens=", max_tokens_,
            " (raise it with nccl_masked(max_tokens))");
    require(hidden.type == rows_, "nccl_masked: hidden is ", to_string(hidden.type), ", the dispatcher carries ",
            to_string(rows_), " rows (nccl_masked(max_tokens, capacity, rows))");
  }

  DispatchOutput<format, space::cuda> dispatch(const device_view& hidden, const device_view& ids,
                                               const device_view& weights, const MoeConfig&, cuda_stream stream) {
    cuda::ep_masked_exchange& x = exchange();
    if (can_overflow()) report_overflow(x);
    const cuda::ep_masked_exchange::received r = x.dispatch(hidden, ids, weights, stream);
    // as many slots arrive as this rank sends when the ranks' batches and routing are alike (a
    // rank without tokens expects a decode batch's); at most top_k of each record received
    return {r.hidden,
            r.masked_m,
            shape_.capacity,
            local_experts_,
            stream,
            std::max<index_t>(hidden.rows, 1) * shape_.top_k,
            size_ * max_tokens_ * shape_.top_k};
  }
  CombineInput<format, space::cuda> combine_input(const DispatchOutput<format, space::cuda>& d, const device_view&) {
    return {exchange().results(), d.stream};
  }
  void combine(const CombineInput<format, space::cuda>& c, const device_view& out) { exchange().combine(out, c.stream); }

  /// Called by the layer once the device has finished every forward queued (its host-memory
  /// forward): throws, on every rank alike and without communicating, if one overflowed a capacity.
  void report_device_errors() {
    if (x_ && can_overflow()) report(x_->settle());
  }

  [[nodiscard]] index_t max_tokens() const noexcept { return max_tokens_; }
  /// The rows of each local expert (after the layer is built: the default made explicit).
  [[nodiscard]] index_t capacity() const noexcept { return shape_.capacity > 0 ? shape_.capacity : capacity_; }

 private:
  cuda::ep_masked_exchange& exchange() {
    require(x_.has_value(), "nccl_masked: not connected (a layer connects its dispatcher when it is built)");
    return *x_;
  }

  // Below ranks · max_tokens an expert can be sent more rows than it holds.
  [[nodiscard]] bool can_overflow() const noexcept { return shape_.capacity < size_ * max_tokens_; }

  // Collective, before a forward's exchange: if any rank has seen a forward overflow since the
  // last report, every rank waits for its device (then every rank's count is the same) and throws.
  void report_overflow(const cuda::ep_masked_exchange& x) {
    int any = x.overflow().forwards;
    detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, comm_), "MPI_Allreduce");
    if (any > reported_) report(x.settle());
  }
  // Every rank's count, once its device has finished, is the same: each throws the same error.
  void report(const cuda::ep_masked_exchange::overflow_count& all) {
    if (all.forwards <= reported_) return;
    const int forwards = all.forwards - reported_;
    reported_ = all.forwards;
    throw collective_error(polymoe::detail::concat(
        "nccl_masked: ", forwards, forwards == 1 ? " forward" : " forwards", " sent a local expert ", all.largest,
        " rows (the most), beyond its capacity ", shape_.capacity,
        "; their outputs are NaN. Raise the capacity (nccl_masked(max_tokens, capacity)) or use nccl_ragged"));
  }

  index_t max_tokens_, capacity_;
  element_type rows_;
  cuda::ep_masked_exchange::shape shape_{};
  std::optional<cuda::ep_masked_exchange> x_;
  int reported_ = 0;
};

}  // namespace polymoe::a2a
