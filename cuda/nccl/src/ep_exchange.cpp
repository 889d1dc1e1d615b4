// The host side of the expert-parallel exchange (polymoe/cuda/ep_exchange.hpp): the NCCL
// communicator, the grow-only buffers, and the order of a forward's launches and NCCL groups.
#include <polymoe/cuda/ep_exchange.hpp>

#include <algorithm>
#include <cstring>
#include <utility>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ep_launch.hpp"
#include "host_check.hpp"

namespace polymoe::cuda {
namespace {

using detail::check;

void nccl_check(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) [[unlikely]]
    throw error(polymoe::detail::concat("nccl: ", call, " failed: ", ncclGetErrorString(r)));
}

ncclComm_t comm_of(const nccl_comm& c) { return static_cast<ncclComm_t>(c.get()); }

// A grow-only device array.
template <class T>
void grow(device_array<T>& a, std::size_t n) {
  if (a.size() >= n) return;
  a = {};
  a = device_array<T>(std::max<std::size_t>(n, 1));
}

long long round16(long long b) { return (b + 15) / 16 * 16; }

// An array exchanged by items: each peer's block of items, `unit` bytes each.
struct column {
  const void* send;
  void* recv;
  long long unit;
};

// One group of NCCL sends and receives of every column's blocks.
void exchange_columns(ncclComm_t comm, cudaStream_t stream, std::initializer_list<column> columns,
                      const std::vector<int>& send_n, const std::vector<long long>& send_off,
                      const std::vector<int>& recv_n, const std::vector<long long>& recv_off, const char* what) {
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  const int S = static_cast<int>(send_n.size());
  for (int p = 0; p < S; ++p)
    for (const column& c : columns) {
      if (send_n[p] > 0)
        nccl_check(ncclSend(static_cast<const unsigned char*>(c.send) + send_off[p] * c.unit,
                            static_cast<std::size_t>(send_n[p] * c.unit), ncclUint8, p, comm, stream),
                   what);
      if (recv_n[p] > 0)
        nccl_check(ncclRecv(static_cast<unsigned char*>(c.recv) + recv_off[p] * c.unit,
                            static_cast<std::size_t>(recv_n[p] * c.unit), ncclUint8, p, comm, stream),
                   what);
    }
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
}

// Every rank's IPC handle of its `mine` (cudaMalloc'd; a rank without one, null, sends zeros,
// which no peer opens), to every rank: collective, waits.
std::vector<cudaIpcMemHandle_t> allgather_handles(ncclComm_t comm, int ranks, int rank, void* mine,
                                                  cudaStream_t stream) {
  cudaIpcMemHandle_t h{};
  if (mine) check(cudaIpcGetMemHandle(&h, mine), "cudaIpcGetMemHandle");
  const std::size_t hb = sizeof h;
  device_array<unsigned char> all(hb * static_cast<std::size_t>(ranks));
  check(cudaMemcpy(all.data() + hb * rank, &h, hb, cudaMemcpyHostToDevice), "cudaMemcpy (handle)");
  nccl_check(ncclAllGather(all.data() + hb * rank, all.data(), hb, ncclUint8, comm, stream), "ncclAllGather (handles)");
  std::vector<cudaIpcMemHandle_t> got(static_cast<std::size_t>(ranks));
  check(cudaMemcpyAsync(got.data(), all.data(), hb * ranks, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync (handles)");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (handles)");
  return got;
}

std::vector<long long> exclusive_sums(const std::vector<int>& n) {
  std::vector<long long> off(n.size() + 1, 0);
  for (std::size_t i = 0; i < n.size(); ++i) off[i + 1] = off[i] + n[i];
  return off;
}

// Blocks of one size: one item of each column to and from each peer p, at p (the counts, and the
// masked exchange's fixed blocks, `unit` bytes each).
void exchange_blocks(ncclComm_t comm, int ranks, cudaStream_t stream, std::initializer_list<column> columns,
                     const char* what) {
  const std::vector<int> one(static_cast<std::size_t>(ranks), 1);
  const std::vector<long long> at = exclusive_sums(one);
  exchange_columns(comm, stream, columns, one, at, one, at, what);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

nccl_comm::unique_id nccl_comm::new_id() {
  static_assert(sizeof(ncclUniqueId) == sizeof(unique_id), "ncclUniqueId is 128 bytes");
  ncclUniqueId id;
  nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  unique_id out;
  std::memcpy(out.data(), &id, sizeof id);
  return out;
}

nccl_comm::nccl_comm(const unique_id& id, int rank, int size) : rank_(rank), size_(size) {
  require(size >= 1 && rank >= 0 && rank < size, "nccl: rank ", rank, " of ", size);
  check(cudaGetDevice(&device_), "cudaGetDevice");
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), sizeof nid);
  ncclComm_t c = nullptr;
  nccl_check(ncclCommInitRank(&c, size, nid, rank), "ncclCommInitRank");
  comm_ = c;
}

nccl_comm::~nccl_comm() {
  if (comm_) (void)ncclCommDestroy(static_cast<ncclComm_t>(comm_));
}

side_stream::side_stream() {
  check(cudaGetDevice(&device_), "cudaGetDevice");
  // the highest priority: the exchange's blocks are scheduled as soon as the kernel's free an SM
  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest), "cudaStreamCreateWithPriority");
  stream_ = s;
  cudaEvent_t e = nullptr;
  if (const cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming); err != cudaSuccess) {
    (void)cudaStreamDestroy(s);
    detail::fail(err, "cudaEventCreateWithFlags");
  }
  event_ = e;
}

side_stream::~side_stream() {
  if (event_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  if (stream_) (void)cudaStreamDestroy(stream_);
}

void side_stream::order(stream_t waited, stream_t waiter) {
  // a wait takes the event as last recorded when it is queued: one event serves every order
  detail::device_scope scope(device_);
  const auto e = static_cast<cudaEvent_t>(event_);
  check(cudaEventRecord(e, waited), "cudaEventRecord");
  check(cudaStreamWaitEvent(waiter, e, 0), "cudaStreamWaitEvent");
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown (ncclGetVersion failed)";
  return polymoe::detail::concat(v / 10000, ".", v / 100 % 100, ".", v % 100);
}

// ---------------------------------------------------------------------------------------------

struct ep_exchange::impl {
  std::shared_ptr<const nccl_comm> comm;
  int S = 1, rank = 0;
  index_t El = 1;
  detail::ep_geometry g;
  index_t tokens = 0;

  // the plan (device), sized for plan_tokens tokens of plan_k slots
  index_t plan_tokens = -1, plan_k = 0;
  device_array<int> rec_pos, slot_pos, expert_counts, counts, pos_of_pair, offsets;
  int* host_counts = nullptr;  // pinned: this rank's send counts, then its received counts

  // the records (device): sent, received; where each received slot's result goes
  struct records {
    device_array<unsigned char> rows;
    device_array<std::int32_t> ids, first;
    device_array<float> weights;
    [[nodiscard]] detail::ep_records view() const { return {rows.data(), ids.data(), weights.data(), first.data()}; }
    void grow_to(std::size_t n, const detail::ep_geometry& g) {
      grow(rows, n * static_cast<std::size_t>(g.row_bytes));
      grow(ids, n * static_cast<std::size_t>(g.k));
      grow(weights, n * static_cast<std::size_t>(g.k));
      grow(first, n);
    }
  } send, recv;
  device_array<std::int32_t> pair_rows;
  device_array<float> results, back;

  // from the counts
  std::vector<int> send_recs, send_slots, recv_recs, recv_slots;
  std::vector<long long> send_rec_off, send_slot_off, recv_rec_off, recv_slot_off;
  std::vector<index_t> expert_rows;
  std::size_t dispatch_bytes = 0, combine_bytes = 0;

  // the direct combine (ep_launch.hpp's flags): back sized for the plan's tokens before the counts
  // travel, each rank's count of its backs so far with them; where any rank's changed, every
  // rank's handle of its back to every rank (all see the same counts: they do it together)
  bool direct = false, direct_now = false;  // set up; taken by this forward
  std::size_t direct_from = 0;
  int epoch = 0;  // direct combines so far, the same on every rank
  device_array<int> flags;
  device_array<int*> flags_of;
  std::vector<void*> mapped_flags;  // [S] the peers' flags, mapped here (null at rank)
  std::vector<int> backs;          // [S] each rank's count of its backs, as last mapped
  std::vector<float*> peer_back;   // [S] mapped here
  std::vector<long long> back_at;  // [S] where this rank's rows start in each peer's back
  const float* back_seen = nullptr;

  [[nodiscard]] int fields() const { return detail::ep_count_fields + static_cast<int>(El); }
  [[nodiscard]] detail::ep_plan_view plan_view() const {
    return {rec_pos.data(), slot_pos.data(), expert_counts.data(), counts.data(), pos_of_pair.data()};
  }

  ~impl() {
    if (host_counts) (void)cudaFreeHost(host_counts);
    for (void* p : mapped_flags)
      if (p) (void)cudaIpcCloseMemHandle(p);
    for (float* p : peer_back)
      if (p) (void)cudaIpcCloseMemHandle(p);
  }
};

ep_exchange::ep_exchange(std::shared_ptr<const nccl_comm> comm, index_t local_experts) : impl_(std::make_unique<impl>()) {
  require(comm != nullptr, "nccl: an exchange needs a communicator");
  require(local_experts >= 1, "nccl: local_experts must be >= 1, got ", local_experts);
  impl_->comm = std::move(comm);
  impl_->S = impl_->comm->size();
  impl_->rank = impl_->comm->rank();
  impl_->El = local_experts;
  detail::device_scope scope(impl_->comm->device());
  const auto n = static_cast<std::size_t>(2 * impl_->S * impl_->fields());
  check(cudaMallocHost(reinterpret_cast<void**>(&impl_->host_counts), n * sizeof(int)), "cudaMallocHost");
  impl_->counts = device_array<int>(n);
  impl_->expert_counts = device_array<int>(static_cast<std::size_t>(impl_->S * local_experts));
  impl_->offsets = device_array<int>(2 * static_cast<std::size_t>(impl_->S + 1));
}
ep_exchange::~ep_exchange() = default;
ep_exchange::ep_exchange(ep_exchange&&) noexcept = default;
ep_exchange& ep_exchange::operator=(ep_exchange&&) noexcept = default;

void ep_exchange::reserve_plan(index_t tokens, index_t top_k, index_t hidden) {
  impl& m = *impl_;
  require(tokens >= 0 && top_k >= 1 && hidden >= 1, "nccl: reserve_plan(", tokens, ", ", top_k, ", ", hidden, ")");
  require(m.S * tokens < (index_t{1} << 31) && tokens * top_k < (index_t{1} << 31), "nccl: ", tokens,
          " tokens are too many to plan over ", m.S, " ranks");
  detail::device_scope scope(m.comm->device());
  // the direct combine's peers write into back before this rank knows what it sends: it holds
  // every slot the plan's tokens may send
  if (m.direct) grow(m.back, static_cast<std::size_t>(tokens * top_k * hidden));
  if (tokens <= m.plan_tokens && top_k <= m.plan_k) return;
  const auto n = static_cast<std::size_t>(m.S * tokens + 1);
  grow(m.rec_pos, n);
  grow(m.slot_pos, n);
  grow(m.pos_of_pair, static_cast<std::size_t>(tokens * top_k));
  m.plan_tokens = std::max(m.plan_tokens, tokens);
  m.plan_k = std::max(m.plan_k, top_k);
}

void ep_exchange::plan(const device_view& ids, index_t hidden, element_type rows, stream_t stream) {
  impl& m = *impl_;
  const index_t T = ids.rows, k = ids.cols;
  require(ids.type == element_type::i32 && (T == 0 || ids.row_stride == k), "nccl: topk_ids must be packed int32 rows");
  require(rows == element_type::f32 || rows == element_type::bf16, "nccl: hidden rows are ", to_string(rows),
          ", expected float32 or bfloat16");
  require(hidden >= 1 && hidden < (index_t{1} << 28), "nccl: hidden=", hidden);
  reserve_plan(T, k, hidden);
  detail::device_scope scope(m.comm->device());
  m.tokens = T;
  m.g.ranks = m.S;
  m.g.local_experts = static_cast<int>(m.El);
  m.g.k = static_cast<int>(k);
  m.g.hidden = static_cast<int>(hidden);
  m.g.elem_bytes = static_cast<int>(element_bytes(rows));
  m.g.row_bytes = round16(hidden * m.g.elem_bytes);
  if (m.direct && m.back.data() != m.back_seen) ++m.g.backs, m.back_seen = m.back.data();
  const auto s = static_cast<cudaStream_t>(stream);
  check(detail::launch_ep_plan(m.g, ids.as<const std::int32_t>(), static_cast<int>(T), m.plan_view(), s),
        "launch of the expert-parallel plan");
  const int w = m.fields();
  int* send_counts = m.counts.data();
  int* recv_counts = send_counts + m.S * w;
  exchange_blocks(comm_of(*m.comm), m.S, s, {{send_counts, recv_counts, 4LL * w}}, "ncclSend/ncclRecv (counts)");
  int* off = m.offsets.data();
  check(detail::launch_ep_offsets(m.g, recv_counts, off, off + m.S + 1, s), "launch of the expert-parallel offsets");
  check(cudaMemcpyAsync(m.host_counts, send_counts, sizeof(int) * 2 * m.S * w, cudaMemcpyDeviceToHost, s),
        "cudaMemcpyAsync (counts)");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize (counts)");
  const int* hs = m.host_counts;
  const int* hr = hs + m.S * w;
  m.send_recs.assign(static_cast<std::size_t>(m.S), 0);
  m.send_slots = m.recv_recs = m.recv_slots = m.send_recs;
  m.expert_rows.assign(static_cast<std::size_t>(m.El), 0);
  for (int p = 0; p < m.S; ++p) {
    m.send_recs[p] = hs[p * w], m.send_slots[p] = hs[p * w + 1];
    m.recv_recs[p] = hr[p * w], m.recv_slots[p] = hr[p * w + 1];
    for (index_t e = 0; e < m.El; ++e) m.expert_rows[e] += hr[p * w + detail::ep_count_fields + e];
  }
  // Every rank sees every rank's counts: each refuses a mix of element types or widths alike,
  // before any row moves.
  const auto type_name = [](int bytes) { return to_string(bytes == 2 ? element_type::bf16 : element_type::f32); };
  for (int p = 0; p < m.S; ++p) {
    require(hr[p * w + 2] == hr[2], "nccl: rank ", p, " passes ", type_name(hr[p * w + 2]), " hidden rows and rank 0 ",
            type_name(hr[2]), "; the ranks of an expert-parallel layer must pass one element type");
    require(hr[p * w + 3] == hr[3], "nccl: rank ", p, " routes ", hr[p * w + 3], " slots a token and rank 0 ", hr[3],
            "; the ranks of an expert-parallel layer must route alike");
  }
  m.send_rec_off = exclusive_sums(m.send_recs);
  m.send_slot_off = exclusive_sums(m.send_slots);
  m.recv_rec_off = exclusive_sums(m.recv_recs);
  m.recv_slot_off = exclusive_sums(m.recv_slots);
  if (!m.direct) return;
  double returned = 0.0;  // bytes of the fp32 rows every rank's tokens may get back
  for (int p = 0; p < m.S; ++p) returned += static_cast<double>(hr[p * w + 5]) * m.g.k * m.g.hidden * 4.0;
  m.direct_now = returned >= static_cast<double>(m.direct_from) * m.S;
  std::vector<int> backs(static_cast<std::size_t>(m.S));
  for (int p = 0; p < m.S; ++p) m.back_at[p] = hr[p * w + 4], backs[p] = hr[p * w + 6];
  if (backs == m.backs) return;
  // some rank's back is a new one: every rank's handle, each peer's mapped again where it is new
  const std::vector<cudaIpcMemHandle_t> got = allgather_handles(comm_of(*m.comm), m.S, m.rank, m.back.data(), s);
  for (int p = 0; p < m.S; ++p) {
    if (p == m.rank || backs[p] == m.backs[p]) continue;  // unchanged (a rank's count moves only to a buffer)
    if (m.peer_back[p]) check(cudaIpcCloseMemHandle(std::exchange(m.peer_back[p], nullptr)), "cudaIpcCloseMemHandle");
    void* ptr = nullptr;
    check(cudaIpcOpenMemHandle(&ptr, got[p], cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle (returned rows)");
    m.peer_back[p] = static_cast<float*>(ptr);
  }
  m.backs = backs;
}

void ep_exchange::reserve_rows() {
  impl& m = *impl_;
  require(m.recv_slot_off[m.S] < (index_t{1} << 31) && m.recv_rec_off[m.S] * m.g.k < (index_t{1} << 31),
          "nccl: this rank receives ", m.recv_slot_off[m.S], " slots of ", m.recv_rec_off[m.S],
          " tokens, more than one exchange holds");
  detail::device_scope scope(m.comm->device());
  const auto H = static_cast<std::size_t>(m.g.hidden);
  const auto recs_in = static_cast<std::size_t>(m.recv_rec_off[m.S]);
  m.send.grow_to(static_cast<std::size_t>(m.send_rec_off[m.S]), m.g);
  m.recv.grow_to(recs_in, m.g);
  grow(m.pair_rows, recs_in * static_cast<std::size_t>(m.g.k));
  grow(m.results, static_cast<std::size_t>(m.recv_slot_off[m.S]) * H);
  if (!m.direct) grow(m.back, static_cast<std::size_t>(m.send_slot_off[m.S]) * H);  // direct: sized by the plan
}

ep_exchange::received ep_exchange::exchange(const device_view& hidden, const device_view& ids,
                                            const device_view& weights, stream_t stream) {
  impl& m = *impl_;
  require(hidden.rows == m.tokens && ids.rows == m.tokens && weights.rows == m.tokens &&
              hidden.cols == m.g.hidden && element_bytes(hidden.type) == m.g.elem_bytes,
          "nccl: exchange of rows other than the planned ones");
  require(m.tokens == 0 || (weights.type == element_type::f32 && weights.row_stride == m.g.k),
          "nccl: topk_weights must be packed float32 rows");
  reserve_rows();
  detail::device_scope scope(m.comm->device());
  const auto s = static_cast<cudaStream_t>(stream);
  check(detail::launch_ep_pack(m.g, hidden.data, hidden.row_stride, ids.as<const std::int32_t>(),
                               weights.as<const float>(), static_cast<int>(m.tokens), m.plan_view(), m.send.view(), s),
        "launch of the expert-parallel pack");
  const detail::ep_records out = m.send.view(), in = m.recv.view();
  const long long k = m.g.k;
  exchange_columns(comm_of(*m.comm), s,
                   {{out.rows, in.rows, m.g.row_bytes},
                    {out.ids, in.ids, 4 * k},
                    {out.weights, in.weights, 4 * k},
                    {out.first, in.first, 4}},
                   m.send_recs, m.send_rec_off, m.recv_recs, m.recv_rec_off, "ncclSend/ncclRecv (records)");
  const int* off = m.offsets.data();
  const auto records = static_cast<index_t>(m.recv_rec_off[m.S]);
  check(detail::launch_ep_pair_rows(m.g, in, static_cast<int>(records), off, off + m.S + 1, m.pair_rows.data(), s),
        "launch of the expert-parallel pair rows");
  m.dispatch_bytes = 0;
  const auto rec_bytes = static_cast<std::size_t>(m.g.row_bytes + 8 * k + 4);
  for (int p = 0; p < m.S; ++p)
    if (p != m.rank) m.dispatch_bytes += static_cast<std::size_t>(m.send_recs[p]) * rec_bytes;
  const int d = m.comm->device();
  const device_view rows{in.rows, hidden.type, records, m.g.hidden, m.g.row_bytes / m.g.elem_bytes, d};
  return {rows, device_view::of(in.ids, records, k, d), device_view::of(in.weights, records, k, d), m.expert_rows,
          device_view::of(m.pair_rows.data(), records, k, d)};
}

device_view ep_exchange::results() const noexcept {
  const impl& m = *impl_;
  const index_t n = m.recv_slot_off.empty() ? 0 : m.recv_slot_off[m.S];
  return device_view::of(m.results.data(), n, m.g.hidden, m.comm->device());
}

void ep_exchange::combine(const device_view& out, stream_t stream) {
  impl& m = *impl_;
  require(out.rows == m.tokens && out.cols == m.g.hidden &&
              (out.type == element_type::f32 || out.type == element_type::bf16),
          "nccl: combine into a view other than the planned tokens' [", m.tokens, ", ", m.g.hidden, "] rows");
  detail::device_scope scope(m.comm->device());
  const auto s = static_cast<cudaStream_t>(stream);
  const long long row = 4LL * m.g.hidden;
  detail::ep_own_rows own{};
  if (m.direct_now) {
    // every peer's back free of the last combine; this rank's results into it; then every
    // peer's here, summed with this rank's own rows where they are; then back free again
    const int e = ++m.epoch;
    int* const* f = m.flags_of.data();
    check(detail::launch_ep_wait(f, m.S, m.rank, m.S, e - 1, s), "launch of the direct combine's wait");
    for (int p = 0; p < m.S; ++p)
      if (p != m.rank && m.recv_slots[p] > 0)
        check(cudaMemcpyAsync(m.peer_back[p] + m.back_at[p] * m.g.hidden, m.results.data() + m.recv_slot_off[p] * m.g.hidden,
                              static_cast<std::size_t>(m.recv_slots[p] * row), cudaMemcpyDeviceToDevice, s),
              "cudaMemcpyAsync (results to a peer)");
    check(detail::launch_ep_set(f, m.S, m.rank, -1, e, s), "launch of the direct combine's signal");
    check(detail::launch_ep_wait(f, m.S, m.rank, -1, e, s), "launch of the direct combine's wait");
    const auto me = static_cast<std::size_t>(m.rank);
    own = {m.results.data(), m.send_slot_off[me], m.send_slot_off[me + 1], m.recv_slot_off[me] - m.send_slot_off[me]};
  } else {
    exchange_columns(comm_of(*m.comm), s, {{m.results.data(), m.back.data(), row}}, m.recv_slots, m.recv_slot_off,
                     m.send_slots, m.send_slot_off, "ncclSend/ncclRecv (results)");
  }
  check(detail::launch_ep_sum(m.g, m.back.data(), own, m.pos_of_pair.data(), static_cast<int>(m.tokens), out.data,
                              out.row_stride, out.type == element_type::bf16, s),
        "launch of the expert-parallel sum");
  if (m.direct_now)
    check(detail::launch_ep_set(m.flags_of.data(), m.S, m.rank, m.S, m.epoch, s), "launch of the direct combine's signal");
  m.combine_bytes = 0;
  for (int p = 0; p < m.S; ++p)
    if (p != m.rank) m.combine_bytes += static_cast<std::size_t>(m.recv_slots[p]) * static_cast<std::size_t>(row);
}

bool ep_exchange::connect_direct(std::size_t from_bytes) {
  impl& m = *impl_;
  m.direct_from = from_bytes;
  if (m.direct) return true;
  detail::device_scope scope(m.comm->device());
  const ncclComm_t c = comm_of(*m.comm);
  const side_stream own;  // a stream of this step's own, released however it ends
  const auto s = static_cast<cudaStream_t>(own.get());
  m.flags = device_array<int>(static_cast<std::size_t>(m.S + 1));
  check(cudaMemset(m.flags.data(), 0, sizeof(int) * (m.S + 1)), "cudaMemset");
  const std::vector<cudaIpcMemHandle_t> got = allgather_handles(c, m.S, m.rank, m.flags.data(), s);
  // map the peers' flags; whether every rank could, agreed
  m.mapped_flags.assign(static_cast<std::size_t>(m.S), nullptr);
  std::vector<int*> of(static_cast<std::size_t>(m.S), m.flags.data());
  int ok = 1;
  for (int p = 0; p < m.S; ++p) {
    if (p == m.rank) continue;
    void* ptr = nullptr;
    if (cudaIpcOpenMemHandle(&ptr, got[p], cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
      (void)cudaGetLastError();
      ok = 0;
      break;
    }
    m.mapped_flags[p] = ptr;
    of[p] = static_cast<int*>(ptr);
  }
  device_array<int> agreed(1);
  check(cudaMemcpy(agreed.data(), &ok, sizeof ok, cudaMemcpyHostToDevice), "cudaMemcpy");
  nccl_check(ncclAllReduce(agreed.data(), agreed.data(), 1, ncclInt32, ncclMin, c, s), "ncclAllReduce (direct)");
  check(cudaMemcpyAsync(&ok, agreed.data(), sizeof ok, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize (direct)");
  if (!ok) {
    for (void*& p : m.mapped_flags)
      if (p) (void)cudaIpcCloseMemHandle(std::exchange(p, nullptr));
    return false;
  }
  m.flags_of = device_array<int*>(static_cast<std::size_t>(m.S));
  m.flags_of.upload(of);
  m.backs.assign(static_cast<std::size_t>(m.S), 0);  // none mapped: the first plan maps them
  m.peer_back.assign(static_cast<std::size_t>(m.S), nullptr);
  m.back_at.assign(static_cast<std::size_t>(m.S), 0);
  m.back = {};  // sized by the plan from now on
  m.direct = true;
  return true;
}

bool ep_exchange::direct() const noexcept { return impl_->direct; }
bool ep_exchange::direct_now() const noexcept { return impl_->direct_now; }

std::size_t ep_exchange::dispatch_bytes() const noexcept { return impl_->dispatch_bytes; }
std::size_t ep_exchange::combine_bytes() const noexcept { return impl_->combine_bytes; }

// ---------------------------------------------------------------------------------------------

struct ep_masked_exchange::impl {
  std::shared_ptr<const nccl_comm> comm;
  shape sh;
  detail::ep_masked_geometry g;
  device_array<unsigned char> send_rows, recv_rows, masked;
  device_array<std::int32_t> send_ids, recv_ids;
  device_array<int> place, masked_m, status, ret_status, back_status, pos_of_pair, totals;
  device_array<float> results, ret, back, w_of_pair;
  int* host_totals = nullptr;  // pinned: the device's totals after each combine
  index_t tokens = 0;

  [[nodiscard]] detail::ep_masked_view view() {
    return {send_rows.data(), send_ids.data(), recv_rows.data(), recv_ids.data(), place.data(),
            masked.data(),    masked_m.data(), status.data(),    results.data(),  ret.data(),
            ret_status.data(), back.data(),    back_status.data(), pos_of_pair.data(), w_of_pair.data(),
            totals.data()};
  }
  ~impl() {
    if (host_totals) (void)cudaFreeHost(host_totals);
  }
};

ep_masked_exchange::ep_masked_exchange(std::shared_ptr<const nccl_comm> comm, const shape& s)
    : impl_(std::make_unique<impl>()) {
  require(comm != nullptr, "nccl: an exchange needs a communicator");
  require(s.local_experts >= 1 && s.top_k >= 1 && s.hidden >= 1 && s.hidden < (index_t{1} << 28),
          "nccl: masked exchange of ", s.local_experts, " local experts, top_k ", s.top_k, ", hidden ", s.hidden);
  require(s.max_tokens >= 1, "nccl: max_tokens must be >= 1, got ", s.max_tokens);
  require(s.capacity >= 1, "nccl: capacity must be >= 1, got ", s.capacity);
  require(s.rows == element_type::f32 || s.rows == element_type::bf16, "nccl: the masked rows are ",
          to_string(s.rows), ", expected float32 or bfloat16");
  impl& m = *impl_;
  m.comm = std::move(comm);
  m.sh = s;
  const index_t S = m.comm->size(), R = S * s.max_tokens;
  require(R * s.top_k * s.hidden < (index_t{1} << 40) && s.local_experts * s.capacity < (index_t{1} << 31) &&
              R * s.top_k < (index_t{1} << 31),
          "nccl: a masked exchange of ", s.max_tokens, " tokens a rank over ", S, " ranks and ", s.local_experts,
          " experts of capacity ", s.capacity, " is too large");
  m.g.ranks = static_cast<int>(S);
  m.g.local_experts = static_cast<int>(s.local_experts);
  m.g.k = static_cast<int>(s.top_k);
  m.g.hidden = static_cast<int>(s.hidden);
  m.g.max_tokens = static_cast<int>(s.max_tokens);
  m.g.capacity = static_cast<int>(s.capacity);
  m.g.elem_bytes = static_cast<int>(element_bytes(s.rows));
  m.g.row_bytes = round16(s.hidden * m.g.elem_bytes);
  detail::device_scope scope(m.comm->device());
  const auto n = [](index_t v) { return static_cast<std::size_t>(v); };
  const index_t H = s.hidden, k = s.top_k, rows = s.local_experts * s.capacity;
  m.send_rows = device_array<unsigned char>(n(R * m.g.row_bytes));
  m.recv_rows = device_array<unsigned char>(n(R * m.g.row_bytes));
  m.send_ids = device_array<std::int32_t>(n(R * k));
  m.recv_ids = device_array<std::int32_t>(n(R * k));
  m.place = device_array<int>(n(R * k));
  m.masked = device_array<unsigned char>(n(rows * m.g.row_bytes));
  m.masked_m = device_array<int>(n(s.local_experts));
  m.status = device_array<int>(1);
  m.ret_status = device_array<int>(n(4 * S));
  m.back_status = device_array<int>(n(4 * S));
  m.pos_of_pair = device_array<int>(n(s.max_tokens * k));
  m.w_of_pair = device_array<float>(n(s.max_tokens * k));
  m.totals = device_array<int>(2);
  m.results = device_array<float>(n(rows * H));
  m.ret = device_array<float>(n(R * k * H));
  m.back = device_array<float>(n(R * k * H));
  // the status words' padding travels too; the counts start at zero
  check(cudaMemset(m.ret_status.data(), 0, sizeof(int) * 4 * S), "cudaMemset");
  check(cudaMemset(m.totals.data(), 0, sizeof(int) * 2), "cudaMemset");
  check(cudaMallocHost(reinterpret_cast<void**>(&m.host_totals), 2 * sizeof(int)), "cudaMallocHost");
  m.host_totals[0] = m.host_totals[1] = 0;
}
ep_masked_exchange::~ep_masked_exchange() = default;
ep_masked_exchange::ep_masked_exchange(ep_masked_exchange&&) noexcept = default;
ep_masked_exchange& ep_masked_exchange::operator=(ep_masked_exchange&&) noexcept = default;

ep_masked_exchange::received ep_masked_exchange::dispatch(const device_view& hidden, const device_view& ids,
                                                          const device_view& weights, stream_t stream) {
  impl& m = *impl_;
  const index_t T = hidden.rows, k = m.sh.top_k;
  require(T >= 0 && T <= m.sh.max_tokens, "nccl: ", T, " tokens, more than the masked exchange's max_tokens ",
          m.sh.max_tokens);
  require(hidden.cols == m.sh.hidden && hidden.type == m.sh.rows, "nccl: hidden is [", T, ", ", hidden.cols, "] ",
          to_string(hidden.type), ", the masked exchange carries ", m.sh.hidden, " ", to_string(m.sh.rows),
          " columns");
  require(T == 0 || (ids.rows == T && ids.cols == k && ids.row_stride == k && ids.type == element_type::i32 &&
                     weights.rows == T && weights.cols == k && weights.row_stride == k &&
                     weights.type == element_type::f32),
          "nccl: topk_ids and topk_weights must be packed [", T, ", ", k, "] int32 and float32 rows");
  detail::device_scope scope(m.comm->device());
  const auto s = static_cast<cudaStream_t>(stream);
  const detail::ep_masked_view v = m.view();
  m.tokens = T;
  check(detail::launch_mk_pack(m.g, hidden.data, hidden.row_stride, ids.as<const std::int32_t>(),
                               weights.as<const float>(), static_cast<int>(T), v, s),
        "launch of the masked pack");
  const long long M = m.g.max_tokens;
  exchange_blocks(comm_of(*m.comm), m.g.ranks, s,
                  {{v.send_rows, v.recv_rows, M * m.g.row_bytes}, {v.send_ids, v.recv_ids, 4 * M * k}},
                  "ncclSend/ncclRecv (masked records)");
  check(detail::launch_mk_place(m.g, v, s), "launch of the masked placement");
  const int d = m.comm->device();
  const index_t rows = m.sh.local_experts * m.sh.capacity;
  return {{m.masked.data(), m.sh.rows, rows, m.sh.hidden, m.g.row_bytes / m.g.elem_bytes, d},
          device_view::of(m.masked_m.data(), m.sh.local_experts, 1, d)};
}

device_view ep_masked_exchange::results() const noexcept {
  const impl& m = *impl_;
  return device_view::of(m.results.data(), m.sh.local_experts * m.sh.capacity, m.sh.hidden, m.comm->device());
}

void ep_masked_exchange::combine(const device_view& out, stream_t stream) {
  impl& m = *impl_;
  require(out.rows == m.tokens && out.cols == m.sh.hidden &&
              (out.type == element_type::f32 || out.type == element_type::bf16),
          "nccl: combine into a view other than the dispatched tokens' [", m.tokens, ", ", m.sh.hidden, "] rows");
  detail::device_scope scope(m.comm->device());
  const auto s = static_cast<cudaStream_t>(stream);
  const detail::ep_masked_view v = m.view();
  check(detail::launch_mk_gather(m.g, v, s), "launch of the masked gather");
  const long long M = m.g.max_tokens;
  exchange_blocks(comm_of(*m.comm), m.g.ranks, s,
                  {{v.ret, m.back.data(), 4 * M * m.g.k * m.g.hidden}, {v.ret_status, m.back_status.data(), 16}},
                  "ncclSend/ncclRecv (masked results)");
  check(detail::launch_mk_sum(m.g, v, static_cast<int>(m.tokens), out.data, out.row_stride,
                              out.type == element_type::bf16, s),
        "launch of the masked sum");
  check(cudaMemcpyAsync(m.host_totals, m.totals.data(), 2 * sizeof(int), cudaMemcpyDeviceToHost, s),
        "cudaMemcpyAsync (overflow count)");
}

ep_masked_exchange::overflow_count ep_masked_exchange::overflow() const noexcept {
  const volatile int* h = impl_->host_totals;
  return {h[0], h[1]};
}

ep_masked_exchange::overflow_count ep_masked_exchange::settle() const {
  detail::device_scope scope(impl_->comm->device());
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return overflow();
}

}  // namespace polymoe::cuda
