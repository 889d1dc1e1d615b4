// The device side of the expert-parallel exchange (ep_launch.hpp): the plan of a rank's tokens
// (counts, one scan, the per-destination counts), the records packed for the wire, the row each
// received slot's result goes to, and each token's returned slot rows summed in slot order.
#include <cstdint>

#include <cuda_bf16.h>

#include "ep_launch.hpp"

namespace polymoe::cuda::detail {
namespace {

constexpr int kScanThreads = 1024;

// Blocks of a grid-stride loop over n items.
unsigned strided_blocks(long long n, int threads) {
  const long long b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : b > 65535 * 16 ? 65535 * 16 : b);
}

// Whether expert id is computed anywhere, and whether on rank d (either geometry).
template <class G>
__device__ __forceinline__ bool served(int id, const G& g) {
  return id >= 0 && id < g.ranks * g.local_experts;
}
template <class G>
__device__ __forceinline__ bool on_rank(int id, int d, const G& g) {
  return served(id, g) && id / g.local_experts == d;
}

// Per (destination, token): rec_pos = 1 when the token has a slot there, slot_pos = its slots
// there; expert_counts gets each slot. One thread a token.
__global__ void ep_count(const ep_geometry g, const std::int32_t* __restrict__ ids, int tokens, ep_plan_view p) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= tokens) return;
  const std::int32_t* row = ids + static_cast<long long>(t) * g.k;
  for (int d = 0; d < g.ranks; ++d) {
    int n = 0;
    for (int j = 0; j < g.k; ++j) {
      const int id = row[j];
      if (on_rank(id, d, g)) ++n;
    }
    const long long at = static_cast<long long>(d) * tokens + t;
    p.rec_pos[at] = n > 0;
    p.slot_pos[at] = n;
  }
  for (int j = 0; j < g.k; ++j)
    if (served(row[j], g)) atomicAdd(p.expert_counts + row[j], 1);
}

// Exclusive scan of rec_pos and slot_pos [n] in place, totals at [n]: one block, each thread a
// contiguous run.
__global__ void __launch_bounds__(kScanThreads) ep_scan(int* __restrict__ a, int* __restrict__ b, int n) {
  __shared__ int sa[kScanThreads], sb[kScanThreads];
  const int tid = threadIdx.x;
  const int per = (n + kScanThreads - 1) / kScanThreads;
  const int lo = min(n, tid * per), hi = min(n, lo + per);
  int ta = 0, tb = 0;
  for (int i = lo; i < hi; ++i) ta += a[i], tb += b[i];
  sa[tid] = ta;
  sb[tid] = tb;
  __syncthreads();
  for (int off = 1; off < kScanThreads; off <<= 1) {
    const int va = tid >= off ? sa[tid - off] : 0, vb = tid >= off ? sb[tid - off] : 0;
    __syncthreads();
    sa[tid] += va;
    sb[tid] += vb;
    __syncthreads();
  }
  int ea = sa[tid] - ta, eb = sb[tid] - tb;
  for (int i = lo; i < hi; ++i) {
    const int x = a[i], y = b[i];
    a[i] = ea;
    b[i] = eb;
    ea += x;
    eb += y;
  }
  if (tid == kScanThreads - 1) a[n] = sa[tid], b[n] = sb[tid];
}

// send_counts per destination d: records, slot rows, the rows' element bytes, k, then the El
// expert counts.
__global__ void ep_send_counts(const ep_geometry g, int tokens, ep_plan_view p) {
  const int w = ep_count_fields + g.local_experts;
  for (int q = threadIdx.x; q < g.ranks * w; q += blockDim.x) {
    const int d = q / w, f = q - d * w;
    const long long lo = static_cast<long long>(d) * tokens, hi = lo + tokens;
    p.send_counts[q] = f == 0   ? p.rec_pos[hi] - p.rec_pos[lo]
                       : f == 1 ? p.slot_pos[hi] - p.slot_pos[lo]
                       : f == 2 ? g.elem_bytes
                       : f == 3 ? g.k
                       : f == 4 ? p.slot_pos[lo]
                       : f == 5 ? tokens
                       : f == 6 ? g.backs
                                : p.expert_counts[d * g.local_experts + f - ep_count_fields];
  }
}

// Copies `bytes` (a multiple of 2) from src to dst with the block's threads: 16 bytes at a time
// where both are 16-byte aligned.
__device__ __forceinline__ void copy_row(unsigned char* __restrict__ dst, const unsigned char* __restrict__ src,
                                         long long bytes) {
  if (((reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src)) & 15) == 0) {
    const long long n16 = bytes / 16;
    for (long long i = threadIdx.x; i < n16; i += blockDim.x)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    for (long long i = n16 * 8 + threadIdx.x; i < bytes / 2; i += blockDim.x)
      reinterpret_cast<std::uint16_t*>(dst)[i] = reinterpret_cast<const std::uint16_t*>(src)[i];
  } else {
    for (long long i = threadIdx.x; i < bytes / 2; i += blockDim.x)
      reinterpret_cast<std::uint16_t*>(dst)[i] = reinterpret_cast<const std::uint16_t*>(src)[i];
  }
}

// One block a token: its record for each destination that serves one of its slots, and the slot
// row each of its slots comes back in.
__global__ void ep_pack(const ep_geometry g, const unsigned char* __restrict__ hidden, long long ld_bytes,
                        const std::int32_t* __restrict__ ids, const float* __restrict__ weights, int tokens,
                        ep_plan_view p, ep_records send) {
  const int t = blockIdx.x;
  if (t >= tokens) return;
  const std::int32_t* id = ids + static_cast<long long>(t) * g.k;
  const float* w = weights + static_cast<long long>(t) * g.k;
  for (int j = threadIdx.x; j < g.k; j += blockDim.x) {
    int pos = -1;
    if (served(id[j], g)) {
      const int d = id[j] / g.local_experts;
      int before = 0;
      for (int i = 0; i < j; ++i) before += on_rank(id[i], d, g);
      pos = p.slot_pos[static_cast<long long>(d) * tokens + t] + before;
    }
    p.pos_of_pair[static_cast<long long>(t) * g.k + j] = pos;
  }
  for (int d = 0; d < g.ranks; ++d) {
    const long long at = static_cast<long long>(d) * tokens + t;
    if (p.rec_pos[at + 1] == p.rec_pos[at]) continue;  // no slot of this token on d
    const long long r = p.rec_pos[at];
    if (threadIdx.x == 0) send.first[r] = p.slot_pos[at] - p.slot_pos[static_cast<long long>(d) * tokens];
    for (int j = threadIdx.x; j < g.k; j += blockDim.x) {
      const int e = id[j];
      send.ids[r * g.k + j] = on_rank(e, d, g) ? e - d * g.local_experts : -1;
      send.weights[r * g.k + j] = w[j];
    }
    copy_row(send.rows + r * g.row_bytes, hidden + t * ld_bytes, static_cast<long long>(g.hidden) * g.elem_bytes);
  }
}

__global__ void ep_offsets(const ep_geometry g, const int* __restrict__ recv_counts, int* __restrict__ rec_off,
                           int* __restrict__ slot_off) {
  if (threadIdx.x != 0) return;
  int r = 0, s = 0;
  for (int q = 0; q < g.ranks; ++q) {
    rec_off[q] = r, slot_off[q] = s;
    r += recv_counts[q * (ep_count_fields + g.local_experts)];
    s += recv_counts[q * (ep_count_fields + g.local_experts) + 1];
  }
  rec_off[g.ranks] = r, slot_off[g.ranks] = s;
}

// One thread a received record: the slot row of each of its slots served here.
__global__ void ep_pair_rows(const ep_geometry g, ep_records recv, int records, const int* __restrict__ rec_off,
                             const int* __restrict__ slot_off, std::int32_t* __restrict__ pair_rows) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= records) return;
  int s = 0;
  while (s + 1 < g.ranks && rec_off[s + 1] <= r) ++s;
  int row = slot_off[s] + recv.first[r];
  for (int j = 0; j < g.k; ++j) {
    const long long q = static_cast<long long>(r) * g.k + j;
    pair_rows[q] = recv.ids[q] >= 0 ? row++ : -1;
  }
}

// What the combines sum: out[t] = Σ_j (w_j ·) back[pos_of_pair[t · k + j]] in slot order, fp32
// from 0, each product rounded before its sum, as the single-device GEMM 2 epilogue and top-k sum
// round them.
struct slot_sum_args {
  const float* back;
  ep_own_rows own;         ///< rows of back read from the results instead, or none
  const int* pos_of_pair;  ///< [T · k] the row of back of each (token, slot), -1 none
  const float* weights;    ///< [T · k], or null: back's rows are weighted already
  const int* status;       ///< [4 · ranks] status words, NaN everywhere when one is set; or null
  int ranks, k, hidden, tokens;
  void* out;
  long long ld_out;
  bool out_bf16;
};

// The largest of the status words [4 · ranks] (one every 4 ints): 0 when none is set.
__device__ __forceinline__ int largest_status(const int* __restrict__ status, int ranks) {
  int worst = 0;
  for (int d = 0; d < ranks; ++d) worst = max(worst, status[4 * d]);
  return worst;
}

__global__ void slot_sum(const slot_sum_args a) {
  const bool failed = a.status && largest_status(a.status, a.ranks) > 0;
  const long long n = static_cast<long long>(a.tokens) * a.hidden;
  for (long long q = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; q < n;
       q += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long t = q / a.hidden;
    const long long c = q - t * a.hidden;
    float acc = 0.0f;
    for (int j = 0; j < a.k; ++j) {
      const long long pos = a.pos_of_pair[t * a.k + j];
      if (pos < 0) continue;
      const float v = pos >= a.own.lo && pos < a.own.hi ? a.own.results[(pos + a.own.shift) * a.hidden + c]
                                                        : a.back[pos * a.hidden + c];
      acc = __fadd_rn(acc, a.weights ? __fmul_rn(a.weights[t * a.k + j], v) : v);
    }
    if (failed) acc = __int_as_float(0x7fc00000);
    if (a.out_bf16)
      static_cast<__nv_bfloat16*>(a.out)[t * a.ld_out + c] = __float2bfloat16_rn(acc);
    else
      static_cast<float*>(a.out)[t * a.ld_out + c] = acc;
  }
}

cudaError_t launch_slot_sum(const slot_sum_args& a, cudaStream_t stream) {
  const long long n = static_cast<long long>(a.tokens) * a.hidden;
  if (n > 0) slot_sum<<<strided_blocks(n, 256), 256, 0, stream>>>(a);
  return cudaGetLastError();
}

// ---------------------------------------------------------------------------------------------
// The direct combine's flags.

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void ep_wait(int* const* flags_of, int ranks, int rank, int at, int target) {
  for (int r = threadIdx.x; r < ranks; r += blockDim.x) {
    if (r == rank) continue;
    const volatile int* f = at >= 0 ? flags_of[r] + at : flags_of[rank] + r;
    const unsigned long long start = global_ns();
    while (*f < target) {
      if (global_ns() - start > 30000000000ull) __trap();
      __nanosleep(64);
    }
  }
  __threadfence_system();
}

__global__ void ep_set(int* const* flags_of, int ranks, int rank, int at, int value) {
  __threadfence_system();  // what this stream wrote before, seen before the flag
  if (at >= 0) {
    if (threadIdx.x == 0) *static_cast<volatile int*>(flags_of[rank] + at) = value;
    return;
  }
  for (int r = threadIdx.x; r < ranks; r += blockDim.x)
    if (r != rank) *static_cast<volatile int*>(flags_of[r] + rank) = value;
}

// ---------------------------------------------------------------------------------------------
// The masked exchange.

// One block a record index t: token t's record for every rank (ids -1 past the batch), its row
// where it has a slot, and where each of its slots comes back.
__global__ void mk_pack(const ep_masked_geometry g, const unsigned char* __restrict__ hidden, long long ld_bytes,
                        const std::int32_t* __restrict__ ids, const float* __restrict__ weights, int tokens,
                        ep_masked_view v) {
  const int t = blockIdx.x;
  const bool real = t < tokens;
  const std::int32_t* id = ids + static_cast<long long>(t) * g.k;
  for (int q = threadIdx.x; q < g.ranks * g.k; q += blockDim.x) {
    const int d = q / g.k, j = q - d * g.k;
    v.send_ids[(static_cast<long long>(d) * g.max_tokens + t) * g.k + j] =
        real && on_rank(id[j], d, g) ? id[j] - d * g.local_experts : -1;
  }
  if (!real) return;
  for (int j = threadIdx.x; j < g.k; j += blockDim.x) {
    int pos = -1;
    const int e = id[j];
    if (served(e, g)) {
      const int d = e / g.local_experts;
      int before = 0;
      for (int i = 0; i < j; ++i) before += on_rank(id[i], d, g);
      pos = (d * g.max_tokens + t) * g.k + before;
    }
    v.pos_of_pair[static_cast<long long>(t) * g.k + j] = pos;
    v.w_of_pair[static_cast<long long>(t) * g.k + j] = weights[static_cast<long long>(t) * g.k + j];
  }
  for (int d = 0; d < g.ranks; ++d) {
    bool any = false;
    for (int j = 0; j < g.k; ++j) any |= on_rank(id[j], d, g);
    if (any)
      copy_row(v.send_rows + (static_cast<long long>(d) * g.max_tokens + t) * g.row_bytes, hidden + t * ld_bytes,
               static_cast<long long>(g.hidden) * g.elem_bytes);
  }
}

constexpr int kPlaceThreads = 256;

// One block a local expert e: its slots among the received records, in (source, token, slot)
// order, numbered by a block-wide scan; those within the capacity get their masked row.
__global__ void __launch_bounds__(kPlaceThreads) mk_place(const ep_masked_geometry g, ep_masked_view v) {
  const int e = blockIdx.x;
  const int R = g.ranks * g.max_tokens, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __shared__ int warp_sums[kPlaceThreads / 32];
  __shared__ int base;
  if (threadIdx.x == 0) base = 0;
  __syncthreads();
  for (int r0 = 0; r0 < R; r0 += kPlaceThreads) {
    const int r = r0 + threadIdx.x;
    const std::int32_t* id = v.recv_ids + static_cast<long long>(r) * g.k;
    int n = 0;
    if (r < R)
      for (int j = 0; j < g.k; ++j) n += id[j] == e;
    int x = n;  // inclusive scan in the warp
    for (int off = 1; off < 32; off <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, x, off);
      if (lane >= off) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    int before = base + x - n;
    for (int w = 0; w < warp; ++w) before += warp_sums[w];
    if (n > 0) {
      int p = before;
      for (int j = 0; j < g.k; ++j)
        if (id[j] == e) {
          v.place[static_cast<long long>(r) * g.k + j] = p < g.capacity ? e * g.capacity + p : -1;
          ++p;
        }
    }
    __syncthreads();
    if (threadIdx.x == kPlaceThreads - 1) base = before + n;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    v.masked_m[e] = min(base, g.capacity);
    if (base > g.capacity) atomicMax(v.status, base);
  }
}

// One block a received record: its row to the masked row of each of its slots.
__global__ void mk_scatter(const ep_masked_geometry g, ep_masked_view v) {
  const long long r = blockIdx.x;
  for (int j = 0; j < g.k; ++j) {
    const int p = v.place[r * g.k + j];
    if (p >= 0)
      copy_row(v.masked + static_cast<long long>(p) * g.row_bytes, v.recv_rows + r * g.row_bytes,
               static_cast<long long>(g.hidden) * g.elem_bytes);
  }
}

// One block a received record (s, t): the results of its slots to rows (s · max_tokens + t) · k + i
// of the returned blocks; the first record of each source's block also writes its status word.
__global__ void mk_gather(const ep_masked_geometry g, ep_masked_view v) {
  const long long r = blockIdx.x;
  if (threadIdx.x == 0 && r % g.max_tokens == 0) v.ret_status[4 * (r / g.max_tokens)] = *v.status;
  int i = 0;
  for (int j = 0; j < g.k; ++j) {
    if (v.recv_ids[r * g.k + j] < 0) continue;
    const int p = v.place[r * g.k + j];
    if (p >= 0)
      copy_row(reinterpret_cast<unsigned char*>(v.ret + (r * g.k + i) * g.hidden),
               reinterpret_cast<const unsigned char*>(v.results + static_cast<long long>(p) * g.hidden),
               4LL * g.hidden);
    ++i;
  }
}

__global__ void mk_totals(const ep_masked_geometry g, ep_masked_view v) {
  const int worst = largest_status(v.back_status, g.ranks);
  if (worst > 0) {
    v.totals[0] += 1;
    v.totals[1] = max(v.totals[1], worst);
  }
}

}  // namespace

cudaError_t launch_ep_plan(const ep_geometry& g, const std::int32_t* ids, int tokens, const ep_plan_view& p,
                           cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(p.expert_counts, 0, sizeof(int) * g.ranks * g.local_experts, stream);
  if (err != cudaSuccess) return err;
  if (tokens > 0) ep_count<<<static_cast<unsigned>((tokens + 127) / 128), 128, 0, stream>>>(g, ids, tokens, p);
  ep_scan<<<1, kScanThreads, 0, stream>>>(p.rec_pos, p.slot_pos, g.ranks * tokens);
  ep_send_counts<<<1, 256, 0, stream>>>(g, tokens, p);
  return cudaGetLastError();
}

cudaError_t launch_ep_pack(const ep_geometry& g, const void* hidden, long long ld_hidden, const std::int32_t* ids,
                           const float* weights, int tokens, const ep_plan_view& p, const ep_records& send,
                           cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  ep_pack<<<static_cast<unsigned>(tokens), 128, 0, stream>>>(g, static_cast<const unsigned char*>(hidden),
                                                              ld_hidden * g.elem_bytes, ids, weights, tokens, p, send);
  return cudaGetLastError();
}

cudaError_t launch_ep_offsets(const ep_geometry& g, const int* recv_counts, int* rec_off, int* slot_off,
                              cudaStream_t stream) {
  ep_offsets<<<1, 32, 0, stream>>>(g, recv_counts, rec_off, slot_off);
  return cudaGetLastError();
}

cudaError_t launch_ep_pair_rows(const ep_geometry& g, const ep_records& recv, int records, const int* rec_off,
                                const int* slot_off, std::int32_t* pair_rows, cudaStream_t stream) {
  if (records == 0) return cudaSuccess;
  ep_pair_rows<<<static_cast<unsigned>((records + 127) / 128), 128, 0, stream>>>(g, recv, records, rec_off, slot_off,
                                                                                 pair_rows);
  return cudaGetLastError();
}

cudaError_t launch_ep_sum(const ep_geometry& g, const float* back, const ep_own_rows& own, const int* pos_of_pair,
                          int tokens, void* out, long long ld_out, bool out_bf16, cudaStream_t stream) {
  return launch_slot_sum(
      {back, own, pos_of_pair, nullptr, nullptr, g.ranks, g.k, g.hidden, tokens, out, ld_out, out_bf16}, stream);
}

cudaError_t launch_ep_wait(int* const* flags_of, int ranks, int rank, int at, int target, cudaStream_t stream) {
  ep_wait<<<1, 32, 0, stream>>>(flags_of, ranks, rank, at, target);
  return cudaGetLastError();
}

cudaError_t launch_ep_set(int* const* flags_of, int ranks, int rank, int at, int value, cudaStream_t stream) {
  ep_set<<<1, 32, 0, stream>>>(flags_of, ranks, rank, at, value);
  return cudaGetLastError();
}

cudaError_t launch_mk_pack(const ep_masked_geometry& g, const void* hidden, long long ld_hidden,
                           const std::int32_t* ids, const float* weights, int tokens, const ep_masked_view& v,
                           cudaStream_t stream) {
  mk_pack<<<static_cast<unsigned>(g.max_tokens), 128, 0, stream>>>(
      g, static_cast<const unsigned char*>(hidden), ld_hidden * g.elem_bytes, ids, weights, tokens, v);
  return cudaGetLastError();
}

cudaError_t launch_mk_place(const ep_masked_geometry& g, const ep_masked_view& v, cudaStream_t stream) {
  const long long R = static_cast<long long>(g.ranks) * g.max_tokens;
  cudaError_t err = cudaMemsetAsync(v.place, 0xff, sizeof(int) * R * g.k, stream);
  if (err == cudaSuccess) err = cudaMemsetAsync(v.status, 0, sizeof(int), stream);
  if (err != cudaSuccess) return err;
  mk_place<<<static_cast<unsigned>(g.local_experts), kPlaceThreads, 0, stream>>>(g, v);
  mk_scatter<<<static_cast<unsigned>(R), 128, 0, stream>>>(g, v);
  return cudaGetLastError();
}

cudaError_t launch_mk_gather(const ep_masked_geometry& g, const ep_masked_view& v, cudaStream_t stream) {
  mk_gather<<<static_cast<unsigned>(static_cast<long long>(g.ranks) * g.max_tokens), 128, 0, stream>>>(g, v);
  return cudaGetLastError();
}

cudaError_t launch_mk_sum(const ep_masked_geometry& g, const ep_masked_view& v, int tokens, void* out,
                          long long ld_out, bool out_bf16, cudaStream_t stream) {
  const cudaError_t err = launch_slot_sum({v.back, {}, v.pos_of_pair, v.w_of_pair, v.back_status, g.ranks, g.k, g.hidden,
                                           tokens, out, ld_out, out_bf16},
                                          stream);
  if (err != cudaSuccess) return err;
  mk_totals<<<1, 1, 0, stream>>>(g, v);
  return cudaGetLastError();
}

}  // namespace polymoe::cuda::detail
