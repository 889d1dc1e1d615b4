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
#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/mp11/list.hpp>

#include <polymoe/a2a/detail/nccl_base.hpp>
#include <polymoe/core/agree.hpp>
#include <polymoe/core/formats.hpp>
#include <polymoe/core/memory_space.hpp>
#include <polymoe/core/roles.hpp>
#include <polymoe/cuda/ep_exchange.hpp>

namespace polymoe::a2a {

class nccl_ragged : public detail::nccl_base {
 public:
  using a2a_concept = a2a_tag;
  using format = format::ragged;
  using memory_spaces = boost::mp11::mp_list<space::cuda>;
  static constexpr std::string_view name = "nccl_ragged";

  /// Micro-batches of a layer's forward (forward(..., compute)): with 2 or more, this rank's tokens
  /// are split into as many batches (some may be empty), each exchanged on the dispatcher's own
  /// stream while the kernel computes the one before on the caller's; the results are the same
  /// bits. The same on every rank (a layer that connects with another count anywhere is refused
  /// on every rank).
  int micro_batches = 1;

  /// true: where every rank runs on one host and each GPU can map the others' memory, the
  /// combine's rows are written by the expert's GPU's copy engines straight into the token's GPU
  /// (CUDA IPC), not through NCCL: the link's own bandwidth, and no SM spent on it; for the
  /// forwards whose returned fp32 rows make at least direct_combine_from bytes a rank on average
  /// (the smaller ones through NCCL, whose one launch costs less than the direct path's steps; 0:
  /// every forward). On by default: it shortens a large forward by a few percent and costs the
  /// small ones nothing measurable (decisions.md#direct-combine); false keeps every combine in
  /// NCCL. The same bits either way; both the same on every rank (refused together otherwise).
  bool direct_combine = true;
  std::size_t direct_combine_from = std::size_t{96} << 20;

  /// Over `comm`'s ranks, one GPU each: the NCCL communicator is made (collectively, on the
  /// layer's device) when the layer is built.
  explicit nccl_ragged(MPI_Comm comm = MPI_COMM_WORLD) : nccl_base(comm) {}
  /// Over an NCCL communicator already made (another layer's: nccl_ragged(other.nccl())), whose
  /// ranks are `comm`'s.
  nccl_ragged(std::shared_ptr<const cuda::nccl_comm> nccl, MPI_Comm comm = MPI_COMM_WORLD)
      : nccl_base(std::move(nccl), comm, name) {}

  /// Called by the layer, inside its agreed build step.
  void configure(const MoeConfig& cfg) {
    mpi_base::configure(cfg);
    top_k_ = cfg.top_k();
    hidden_ = cfg.hidden;
  }
  /// Called by the layer once every rank has built its own (collective): the NCCL communicator
  /// (made now unless given) and this layer's exchanges, on `device`.
  void connect(int device) {
    connect_on(device, name, [&] {
      require(micro_batches >= 1 && micro_batches <= 64, "nccl_ragged: micro_batches must be in [1, 64], got ",
              micro_batches);
      exchanges_.clear();
      last_ = nullptr;
      for (int i = 0; i < std::min(micro_batches, 2); ++i) exchanges_.emplace_back(nccl_, local_experts_);
      if (micro_batches > 1) side_ = std::make_unique<cuda::side_stream>();
    });
    // another count elsewhere would be another sequence of exchanges
    agree_same(micro_batches, "nccl_ragged: micro_batches");
    agree_same(direct_combine ? 1 : 0, "nccl_ragged: direct_combine");
    agree_same(static_cast<long long>(direct_combine_from), "nccl_ragged: direct_combine_from");
    if (direct_combine && on_one_host())
      for (cuda::ep_exchange& x : exchanges_) x.connect_direct(direct_combine_from);
  }
  /// Whether the combine writes into the peers' memory directly (direct_combine, where it can;
  /// for the forwards of direct_combine_from bytes and more).
  [[nodiscard]] bool combines_directly() const noexcept { return !exchanges_.empty() && exchanges_.front().direct(); }
  /// Whether the last forward's (last micro-batch's) combine went direct.
  [[nodiscard]] bool last_combine_direct() const noexcept { return last_ && last_->direct_now(); }
  /// Grows what the plan of `tokens` tokens needs (the layer calls it inside its agreed checks).
  void reserve(index_t tokens) {
    for (cuda::ep_exchange& x : exchanges()) x.reserve_plan(tokens, top_k_, hidden_);
  }

  /// The routed step of a layer: dispatch, compute(d, c) (the kernel on `stream`), combine; in
  /// micro_batches batches, exchanged on the dispatcher's stream while the kernel computes.
  template <class Compute>
  void forward(const device_view& hidden, const device_view& ids, const device_view& weights, const MoeConfig& cfg,
               const device_view& out, cuda_stream stream, Compute&& compute) {
    if (micro_batches <= 1) {
      auto d = dispatch(hidden, ids, weights, cfg, stream);
      auto c = combine_input(d, out);
      compute(d, c);
      combine(c, out);
      return;
    }
    std::vector<cuda::ep_exchange>& xs = exchanges();
    const index_t T = hidden.rows, m = micro_batches;
    const auto first = [&](index_t i) { return T * i / m; };
    const auto rows = [&](const device_view& v, index_t i) { return v.middle_rows(first(i), first(i + 1) - first(i)); };
    const cuda_stream side = side_->get();
    side_->order(stream, side);  // the inputs are the caller's stream's work
    batch next = exchange_on(xs[0], rows(hidden, 0), rows(ids, 0), rows(weights, 0), side);
    for (index_t i = 0; i < m; ++i) {
      cuda::ep_exchange& x = xs[static_cast<std::size_t>(i % 2)];
      const batch b = next;
      side_->order(side, stream);  // the kernel after its rows arrived
      DispatchOutput<format, space::cuda> d = b.d;
      d.stream = stream;
      CombineInput<format, space::cuda> c{{x.results(), stream}, b.pair_rows};
      compute(d, c);
      if (i + 1 < m)  // the next batch's exchange while the kernel computes this one
        next = exchange_on(xs[static_cast<std::size_t>((i + 1) % 2)], rows(hidden, i + 1), rows(ids, i + 1),
                           rows(weights, i + 1), side);
      side_->order(stream, side);  // the results back after the kernel wrote them
      x.combine(rows(out, i), side);
    }
    side_->order(side, stream);  // the caller's stream goes on after the last combine
  }

  DispatchOutput<format, space::cuda> dispatch(const device_view& hidden, const device_view& ids,
                                               const device_view& weights, const MoeConfig&, cuda_stream stream) {
    const batch b = exchange_on(exchanges().front(), hidden, ids, weights, stream);
    pair_rows_ = b.pair_rows;
    return b.d;
  }
  CombineInput<format, space::cuda> combine_input(const DispatchOutput<format, space::cuda>& d, const device_view&) {
    return {{exchanges().front().results(), d.stream}, pair_rows_};
  }
  void combine(const CombineInput<format, space::cuda>& c, const device_view& out) {
    exchanges().front().combine(out, c.stream);
  }

  /// Bytes this rank sent to other ranks in the last dispatch (records) and combine (fp32 rows);
  /// of the last micro-batch when there are several.
  [[nodiscard]] std::size_t dispatch_bytes() const noexcept { return last_ ? last_->dispatch_bytes() : 0; }
  [[nodiscard]] std::size_t combine_bytes() const noexcept { return last_ ? last_->combine_bytes() : 0; }

 private:
  struct batch {
    DispatchOutput<format, space::cuda> d;
    device_view pair_rows;
  };

  std::vector<cuda::ep_exchange>& exchanges() {
    require(!exchanges_.empty(), "nccl_ragged: not connected (a layer connects its dispatcher when it is built)");
    return exchanges_;
  }

  // Plans (collective: the counts), grows (agreed) and exchanges (collective: the records) the
  // rows of one batch on `stream`.
  batch exchange_on(cuda::ep_exchange& x, const device_view& hidden, const device_view& ids, const device_view& weights,
                    cuda_stream stream) {
    device_view planned = ids;
    if (planned.rows == 0) planned.cols = planned.row_stride = top_k_;  // any width when there are no tokens
    x.plan(planned, hidden.cols, hidden.type, stream);  // a refusal there is every rank's
    polymoe::detail::agree_on(*this, [&] { x.reserve_rows(); });
    const cuda::ep_exchange::received r = x.exchange(hidden, planned, weights, stream);
    last_ = &x;
    batch b{{{r.hidden, r.ids, r.weights, local_experts_, stream}, {}}, r.pair_rows};
    b.d.counts = r.counts;
    return b;
  }

  std::vector<cuda::ep_exchange> exchanges_;  // one, or two used in turn by micro-batches
  std::unique_ptr<cuda::side_stream> side_;
  const cuda::ep_exchange* last_ = nullptr;
  device_view pair_rows_;
  index_t top_k_ = 1, hidden_ = 1;
};

}  // namespace polymoe::a2a
