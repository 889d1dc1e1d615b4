// The expert computation on the device: counting sort of the (token, slot) pairs by expert, the
// bf16 input rows, GEMM 1 with the activation in its epilogue, GEMM 2 with the routing weight,
// and the top-k sum. Every launch is sized for the worst case of the routing (T·k rows), so the
// host never needs the routing's counts; blocks without work return at once.
#include <cstdint>
#include <type_traits>
#include <utility>

#include <cuda_bf16.h>

#include "launch.hpp"
#include "routing_device.cuh"

namespace polymoe::cuda::detail {
namespace {

// ---------------------------------------------------------------------------------------------
// Programmatic dependent launch: every kernel of a forward is launched so that it may start while
// the kernel before it finishes (its blocks scheduled, its prologue run); each calls griddep_wait()
// in every block before it touches memory an earlier kernel writes, and before it exits, so that
// a kernel's completion implies the completion of all kernels before it. griddep_launch() lets
// the next kernel be scheduled early; it orders no memory.

__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void griddep_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

template <class... Params, class... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// One row tile of the grid, as the sort leaves it for the GEMMs: a single load tells a block its
// expert and rows, so that its weights start streaming at once.
__device__ __forceinline__ void put_tile(int* tile_info, int tile, int e, int first_row, int rows) {
  reinterpret_cast<int4*>(tile_info)[tile] = make_int4(e, first_row, rows, 0);
}

// Tiles of expert e (cnt rows from sorted row `first`, first tile `t0`) into tile_info.
__device__ __forceinline__ void put_expert_tiles(int* tile_info, int e, int cnt, int first, int t0, int tile_rows) {
  for (int i = 0; i * tile_rows < cnt; ++i)
    put_tile(tile_info, t0 + i, e, first + i * tile_rows, min(tile_rows, cnt - i * tile_rows));
}

// ---------------------------------------------------------------------------------------------
// Sorting (token, slot) pairs by expert. Rows of an expert are in pair order (token, then slot),
// as the CPU kernels sort them, whatever the block and warp scheduling: positions come from
// counts, never from atomics' order.

constexpr int kSortThreads = 256;
constexpr int kSortWarps = kSortThreads / 32;
constexpr int kSortIters = 4;  // pairs a block sorts: kSortThreads · kSortIters
constexpr int kSortChunk = kSortThreads * kSortIters;

__device__ __forceinline__ int valid_id(const std::int32_t* ids, long long i, long long pairs, int E) {
  if (i >= pairs) return -1;
  const int e = ids[i];
  return e >= 0 && e < E ? e : -1;
}

// Counts of the block's chunk of pairs into sh[E] (zeroed by the caller).
// Rounds of kSortThreads pairs the chunk from `first` holds (the last chunk may hold fewer).
__device__ __forceinline__ int chunk_iters(long long first, long long pairs) {
  const long long n = (pairs - first + kSortThreads - 1) / kSortThreads;
  return n < kSortIters ? static_cast<int>(n) : kSortIters;
}

__device__ void count_chunk(const std::int32_t* ids, long long first, long long pairs, int E, int* sh) {
  const int iters = chunk_iters(first, pairs);
  for (int it = 0; it < iters; ++it) {
    const int e = valid_id(ids, first + it * kSortThreads + threadIdx.x, pairs, E);
    if (e >= 0) atomicAdd(&sh[e], 1);
  }
}

// Places the block's chunk of pairs, stably: `base[e]` is the first sorted row of expert e for this
// chunk (advanced here); warp_count is [kSortWarps, E] of shared memory.
__device__ void scatter_chunk(const std::int32_t* ids, long long first, long long pairs, int E, int* base,
                              int* warp_count, int* sorted_pair, int* pos_of_pair) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int iters = chunk_iters(first, pairs);  // the same in all threads: the barriers below are uniform
  for (int it = 0; it < iters; ++it) {
    for (int q = threadIdx.x; q < kSortWarps * E; q += blockDim.x) warp_count[q] = 0;
    __syncthreads();
    const long long i = first + it * kSortThreads + threadIdx.x;
    const int e = valid_id(ids, i, pairs, E);
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const unsigned below = peers & ((1u << lane) - 1u);
    if (e >= 0 && below == 0) warp_count[warp * E + e] = __popc(peers);
    __syncthreads();
    if (i < pairs) {
      if (e < 0) {
        pos_of_pair[i] = -1;
      } else {
        int pos = base[e] + __popc(below);
        for (int w = 0; w < warp; ++w) pos += warp_count[w * E + e];
        sorted_pair[pos] = static_cast<int>(i);
        pos_of_pair[i] = pos;
      }
    }
    __syncthreads();
    for (int x = threadIdx.x; x < E; x += blockDim.x) {
      int n = 0;
      for (int w = 0; w < kSortWarps; ++w) n += warp_count[w * E + x];
      base[x] += n;
    }
    __syncthreads();
  }
}

// The experts' first rows and first row tiles from their counts (one thread).
__device__ void expert_offsets(int E, int tile_rows, const int* counts, int* offsets, int* tile_start) {
  int rows = 0, tiles = 0;
  for (int e = 0; e < E; ++e) {
    offsets[e] = rows;
    tile_start[e] = tiles;
    rows += counts[e];
    tiles += (counts[e] + tile_rows - 1) / tile_rows;
  }
  offsets[E] = rows;
  tile_start[E] = tiles;
}

__global__ void sort_count(const std::int32_t* __restrict__ ids, long long pairs, int E, int* __restrict__ hist) {
  extern __shared__ int sh[];
  griddep_wait();
  griddep_launch();
  for (int e = threadIdx.x; e < E; e += blockDim.x) sh[e] = 0;
  __syncthreads();
  count_chunk(ids, static_cast<long long>(blockIdx.x) * kSortChunk, pairs, E, sh);
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) hist[static_cast<long long>(blockIdx.x) * E + e] = sh[e];
}

// One block: per expert, the blocks' counts become offsets within the expert; then the experts'
// offsets and their first row tile (tile_rows rows a tile).
// No __restrict__ on the arrays one thread writes and the others read after a barrier (counts): with
// it the compiler may keep a value loaded before the barrier.
__global__ void sort_scan(int blocks, int E, int tile_rows, int tiles_max, int* hist, int* counts, int* offsets,
                          int* tile_start, int* tile_info) {
  constexpr int kBatch = 8;  // loads in flight per thread
  griddep_wait();
  griddep_launch();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int run = 0;
    for (int b0 = 0; b0 < blocks; b0 += kBatch) {
      int v[kBatch];
#pragma unroll
      for (int q = 0; q < kBatch; ++q) v[q] = b0 + q < blocks ? hist[static_cast<long long>(b0 + q) * E + e] : 0;
#pragma unroll
      for (int q = 0; q < kBatch; ++q) {
        if (b0 + q < blocks) hist[static_cast<long long>(b0 + q) * E + e] = run;
        run += v[q];
      }
    }
    counts[e] = run;
  }
  __syncthreads();
  if (threadIdx.x == 0) expert_offsets(E, tile_rows, counts, offsets, tile_start);
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    put_expert_tiles(tile_info, e, counts[e], offsets[e], tile_start[e], tile_rows);
  for (int q = tile_start[E] + threadIdx.x; q < tiles_max; q += blockDim.x) put_tile(tile_info, q, -1, 0, 0);
}

__global__ void sort_scatter(const std::int32_t* __restrict__ ids, long long pairs, int E,
                             const int* __restrict__ hist, const int* __restrict__ offsets,
                             int* __restrict__ sorted_pair, int* __restrict__ pos_of_pair) {
  extern __shared__ int sh[];  // base [E] | warp_count [kSortWarps, E]
  griddep_wait();
  griddep_launch();
  int* base = sh;
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    base[e] = offsets[e] + hist[static_cast<long long>(blockIdx.x) * E + e];
  __syncthreads();
  scatter_chunk(ids, static_cast<long long>(blockIdx.x) * kSortChunk, pairs, E, base, sh + E, sorted_pair,
                pos_of_pair);
}

// ---------------------------------------------------------------------------------------------
// Expert input rows: x[t] = bf16(hidden[t] (· weight of its one slot)), zero in the padding.

__device__ __forceinline__ float load_input(const void* hidden, bool bf16, long long i) {
  return bf16 ? __bfloat162float(__ushort_as_bfloat16(static_cast<const std::uint16_t*>(hidden)[i]))
              : static_cast<const float*>(hidden)[i];
}

// Eight consecutive columns of one input row (item = t · hp/8 + c0/8): loaded 16 bytes at a time
// where `vec` (the rows aligned for it) and the eight are inside H, else one by one.
struct input_rows {
  const void* hidden;
  bool bf16, vec;
  long long ld;
  int H, hp;
  const float* weights;  ///< [T] routing weights when weight_on_input, else null
  std::uint16_t* x;
  const std::int32_t* only;  ///< [T] one slot a token: the rows whose id is -1 are not read; or null
};

__device__ __forceinline__ void input_chunk(const input_rows& in, long long item) {
  const int per = in.hp / 8;
  const long long t = item / per;
  const int c0 = static_cast<int>(item - t * per) * 8;
  if (in.only && in.only[t] < 0) return;
  float v[8];
  if (in.vec && c0 + 8 <= in.H) {
    if (in.bf16) {
      const uint4 u = *reinterpret_cast<const uint4*>(static_cast<const std::uint16_t*>(in.hidden) + t * in.ld + c0);
      const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[2 * j] = __uint_as_float(w[j] << 16);
        v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
      }
    } else {
      const float4* f = reinterpret_cast<const float4*>(static_cast<const float*>(in.hidden) + t * in.ld + c0);
      const float4 lo = f[0], hi = f[1];
      v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = c0 + j < in.H ? load_input(in.hidden, in.bf16, t * in.ld + c0 + j) : 0.0f;
  }
  if (in.weights) {
    const float w = in.weights[t];  // top_k is 1: the token's one slot
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (c0 + j < in.H) v[j] *= w;
  }
  uint4 o;
  unsigned* ow = &o.x;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __nv_bfloat162 b = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
    ow[j] = *reinterpret_cast<const unsigned*>(&b);
  }
  *reinterpret_cast<uint4*>(in.x + t * in.hp + c0) = o;
}

__global__ void make_inputs(const input_rows in, long long items) {
  griddep_wait();
  griddep_launch();
  for (long long q = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; q < items;
       q += static_cast<long long>(gridDim.x) * blockDim.x)
    input_chunk(in, q);
}

// ---------------------------------------------------------------------------------------------
// E4M3 activations (the fp8 schemes), as polymoe/quantize/fp8.hpp defines them: per group, s =
// amax / 448 (1 for an all-zero group) and code = e4m3_satfinite(x / s), in fp32 round-to-nearest.
// One warp a group of 128 columns (four a lane), or a whole row when the group is the row.

// Two E4M3 codes (lo in the low byte), round-to-nearest-even, saturated to ±448.
__device__ __forceinline__ unsigned e4m3x2(float lo, float hi) {
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

struct quant_rows {
  const void* src;  ///< fp32, or bf16 bits when bf16
  bool bf16;
  bool vec;  ///< rows aligned for 16-byte (fp32) or 8-byte (bf16) loads of four values
  long long ld;
  int cols;               ///< columns holding values; past them up to cp, zeros
  int cp;                 ///< padded columns (a multiple of 128): codes [rows, cp], scales [rows, cp/128]
  bool per_row;           ///< one scale a row, else one per 128 columns
  const float* weights;   ///< weight_on_input: [rows] multiplied into each row first, or null
  std::uint8_t* q;
  float* scale;
  const std::int32_t* only = nullptr;  ///< [rows] one slot a row: the rows whose id is -1 are left alone; or null
};

__device__ __forceinline__ void quant_load4(const quant_rows& r, long long row, int c0, float (&v)[4]) {
  if (r.vec && c0 + 4 <= r.cols) {
    if (r.bf16) {
      const uint2 u = *reinterpret_cast<const uint2*>(static_cast<const std::uint16_t*>(r.src) + row * r.ld + c0);
      v[0] = __uint_as_float(u.x << 16), v[1] = __uint_as_float(u.x & 0xffff0000u);
      v[2] = __uint_as_float(u.y << 16), v[3] = __uint_as_float(u.y & 0xffff0000u);
    } else {
      const float4 f = *reinterpret_cast<const float4*>(static_cast<const float*>(r.src) + row * r.ld + c0);
      v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = c0 + j < r.cols ? load_input(r.src, r.bf16, row * r.ld + c0 + j) : 0.0f;
  }
  if (r.weights) {
    const float w = r.weights[row];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (c0 + j < r.cols) v[j] *= w;
  }
}

// A warp's share of a row whose warps share it (quant_rows_shared): the amax of groups g0, g0 +
// step, .. < g1 of `row`, as bits (non-negative floats order as their bits), and whether a value is
// not finite. quant_item below does the same for one item with its own loops: the kernels of the
// other schemes compile it, and they stay as they were.
__device__ __forceinline__ void quant_amax(const quant_rows& r, long long row, int g0, int g1, int step, int lane,
                                           unsigned& a, unsigned& bad) {
  a = 0, bad = 0;
  for (int g = g0; g < g1; g += step) {
    float v[4];
    quant_load4(r, row, g * 128 + lane * 4, v);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float m = fabsf(v[j]);
      bad |= !(m <= 3.402823466e38f);  // an infinity or a NaN
      a = max(a, __float_as_uint(m));
    }
  }
  a = __reduce_max_sync(0xffffffffu, a);
  bad = __reduce_or_sync(0xffffffffu, bad);
}

// The scale of a group (or row) of amax a (bits), NaN when a value is not finite.
__device__ __forceinline__ float quant_scale(unsigned a, unsigned bad) {
  const float amax = __uint_as_float(a);
  return bad ? __uint_as_float(0x7fc00000u) : amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
}
// The codes of four values, with scale s (0 when a value of the group is not finite).
__device__ __forceinline__ unsigned quant_codes(const float (&v)[4], float s, unsigned bad) {
  unsigned codes = 0;
  if (!bad)
    codes = e4m3x2(__fdiv_rn(v[0], s), __fdiv_rn(v[1], s)) | e4m3x2(__fdiv_rn(v[2], s), __fdiv_rn(v[3], s)) << 16;
  return codes;
}

// Those groups' codes and scales, from the amax of their row (quant_amax's, over all its warps):
// codes at q + row · ldq + column, the scale of group g at scale[row · row_step + g · group_step].
__device__ __forceinline__ void quant_store_to(const quant_rows& r, long long row, int g0, int g1, int step,
                                               unsigned a, unsigned bad, int lane, std::uint8_t* q, long long ldq,
                                               float* scale, long long row_step, int group_step) {
  const float s = quant_scale(a, bad);
  for (int g = g0; g < g1; g += step) {
    float v[4];
    quant_load4(r, row, g * 128 + lane * 4, v);
    *reinterpret_cast<unsigned*>(q + row * ldq + g * 128 + lane * 4) = quant_codes(v, s, bad);
    if (lane == 0) scale[row * row_step + g * group_step] = s;
  }
}
// ... into the quantized rows of r: codes [rows, cp], scales [rows, cp/128].
__device__ __forceinline__ void quant_store(const quant_rows& r, long long row, int g0, int g1, int step, unsigned a,
                                            unsigned bad, int lane) {
  const float s = quant_scale(a, bad);
  const int groups = r.cp / 128;
  for (int g = g0; g < g1; g += step) {
    float v[4];
    quant_load4(r, row, g * 128 + lane * 4, v);
    *reinterpret_cast<unsigned*>(r.q + row * r.cp + g * 128 + lane * 4) = quant_codes(v, s, bad);
    if (lane == 0) r.scale[row * groups + g] = s;
  }
}

// Item `item` (a row, or a row's group of 128) by the calling warp.
__device__ void quant_item(const quant_rows& r, long long item, int lane) {
  const int groups = r.cp / 128;
  const long long row = r.per_row ? item : item / groups;
  const int g0 = r.per_row ? 0 : static_cast<int>(item - row * groups), g1 = r.per_row ? groups : g0 + 1;
  if (r.only && r.only[row] < 0) return;  // the whole warp: one item
  float v[4];
  unsigned a = 0, bad = 0;  // amax as bits (non-negative floats order as their bits)
  for (int g = g0; g < g1; ++g) {
    quant_load4(r, row, g * 128 + lane * 4, v);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float m = fabsf(v[j]);
      bad |= !(m <= 3.402823466e38f);  // an infinity or a NaN
      a = max(a, __float_as_uint(m));
    }
  }
  a = __reduce_max_sync(0xffffffffu, a);
  bad = __reduce_or_sync(0xffffffffu, bad);
  const float amax = __uint_as_float(a);
  const float s = bad ? __uint_as_float(0x7fc00000u) : amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
  for (int g = g0; g < g1; ++g) {
    if (r.per_row) quant_load4(r, row, g * 128 + lane * 4, v);
    unsigned codes = 0;
    if (!bad)
      codes = e4m3x2(__fdiv_rn(v[0], s), __fdiv_rn(v[1], s)) | e4m3x2(__fdiv_rn(v[2], s), __fdiv_rn(v[3], s)) << 16;
    *reinterpret_cast<unsigned*>(r.q + row * r.cp + g * 128 + lane * 4) = codes;
    if (lane == 0) r.scale[row * groups + g] = s;
  }
}

// Per-row scales, rows 0 .. rows - 1 and fewer rows than the block has warps: the block's warps
// share each row (warps / rows a row, each a strided set of its groups), so that a row's groups are
// read in parallel rather than one after another by one warp; their amax meet in shared memory.
// Every thread of the block calls it.
__device__ void quant_rows_shared(const quant_rows& r, int rows) {
  __shared__ unsigned part[32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int P = static_cast<int>(blockDim.x >> 5) / rows, team = warp / P, m = warp % P;
  const int groups = r.cp / 128;
  const bool active = team < rows && !(r.only && r.only[team] < 0);
  unsigned a = 0, bad = 0;
  if (active) quant_amax(r, team, m, groups, P, lane, a, bad);
  if (lane == 0) part[warp] = a | bad << 31;  // a: a float's bits, below 2^31
  __syncthreads();
  if (!active) return;
  unsigned t = 0;
  for (int j = 0; j < P; ++j) t = max(t, part[team * P + j]);
  quant_store(r, team, m, groups, P, t & 0x7fffffffu, t >> 31, lane);
}

// Items of `rows` rows: a row each, or a row's groups of 128.
__host__ __device__ __forceinline__ long long quant_items(const quant_rows& r, long long rows) {
  return r.per_row ? rows : rows * (r.cp / 128);
}

// The items by the warps of `blocks` blocks from block `first` on, one warp an item at a time.
__device__ __forceinline__ void quant_by_warps(const quant_rows& r, long long items, int first, int blocks) {
  const long long warps = static_cast<long long>(blocks) * (blockDim.x >> 5);
  for (long long q = (static_cast<long long>(blockIdx.x - first) * blockDim.x + threadIdx.x) >> 5; q < items;
       q += warps)
    quant_item(r, q, threadIdx.x & 31);
}

// kShared (per-row scales, fewer rows than a block has warps, one block): quant_rows_shared. The
// other instances hold no block barrier and no shared memory.
template <bool kShared>
__global__ void quantize_rows(const quant_rows r, long long items) {
  griddep_wait();
  griddep_launch();
  if constexpr (kShared) quant_rows_shared(r, static_cast<int>(items));
  else quant_by_warps(r, items, 0, gridDim.x);
}

// GEMM 2's input rows: the intermediate rows of each row tile of the map (rows the routing leaves
// empty are not touched). One block a row tile.
template <bool kShared>
__global__ void quantize_tiles(const quant_rows r, const int* __restrict__ tile_info) {
  griddep_wait();
  griddep_launch();
  const int4 ti = reinterpret_cast<const int4*>(tile_info)[blockIdx.x];
  if (ti.x < 0) return;
  quant_rows t = r;
  const int groups = r.cp / 128;
  t.q += static_cast<long long>(ti.y) * r.cp;
  t.scale += static_cast<long long>(ti.y) * groups;
  t.src = static_cast<const float*>(r.src) + static_cast<long long>(ti.y) * r.ld;
  if constexpr (kShared) {  // per-row scales
    if (ti.z < static_cast<int>(blockDim.x >> 5)) {
      quant_rows_shared(t, ti.z);
      return;
    }
  }
  const long long items = quant_items(t, ti.z);
  for (long long q = threadIdx.x >> 5; q < items; q += blockDim.x >> 5) quant_item(t, q, threadIdx.x & 31);
}

// The decode preparation, one launch when the pairs fit one chunk: block 0 routes (tokens <=
// kSortWarps, one warp a token, when `route`), then sorts the pairs and writes the tile map; blocks
// 1.. write the input rows meanwhile (they need no routing: weight_on_input never routes here).
struct prep_params {
  routing_args r;
  const float* logits;
  bool route;
  std::int32_t* ids;  // written by block 0 when route, else the caller's
  float* weights;
  long long pairs;
  int tokens, E, tile_rows, tiles_max;
  int* tile_info;
  int* sorted_pair;
  int* pos_of_pair;
  input_rows in;
  quant_rows qin;  ///< e4m3: the input rows as codes instead (quant set)
  bool quant;
  long long items;  ///< input chunks, or quant items (one a warp)
};

// At most 32 pairs: the sort and the tile map by one warp, in registers (lane i: pair i). The same
// result as the counting sort: experts in order, each one's pairs in pair order.
__device__ void sort_pairs_warp(const prep_params& p) {
  const int lane = threadIdx.x & 31;
  const int e = valid_id(p.ids, lane, p.pairs, p.E);  // -1: no pair, or not computed
  const unsigned peers = __match_any_sync(0xffffffffu, e);
  const unsigned below = peers & ((1u << lane) - 1u);  // the expert's pairs before this one
  const int cnt = __popc(peers), tr = p.tile_rows;
  const bool lead = e >= 0 && below == 0;  // the expert's first pair
  const int tiles = lead ? (cnt + tr - 1) / tr : 0;
  int first = 0, t0 = 0;  // rows and row tiles of the experts below e
  for (int j = 0; j < 32; ++j) {
    const int ej = __shfl_sync(0xffffffffu, e, j), tj = __shfl_sync(0xffffffffu, tiles, j);
    if (ej >= 0 && ej < e) ++first, t0 += tj;
  }
  const int total = __reduce_add_sync(0xffffffffu, tiles);
  if (lane < p.pairs) {
    const int pos = e < 0 ? -1 : first + __popc(below);
    if (pos >= 0) p.sorted_pair[pos] = lane;
    p.pos_of_pair[lane] = pos;
  }
  if (lead) put_expert_tiles(p.tile_info, e, cnt, first, t0, tr);
  for (int q = total + lane; q < p.tiles_max; q += 32) put_tile(p.tile_info, q, -1, 0, 0);
}

template <bool kShared>
__global__ void __launch_bounds__(kSortThreads) decode_prep(const prep_params p) {
  extern __shared__ int sh[];
  griddep_wait();
  griddep_launch();
  if (blockIdx.x > 0) {
    if (p.quant) {
      if constexpr (kShared) quant_rows_shared(p.qin, static_cast<int>(p.items));
      else quant_by_warps(p.qin, p.items, 1, gridDim.x - 1);
      return;
    }
    for (long long q = static_cast<long long>(blockIdx.x - 1) * blockDim.x + threadIdx.x; q < p.items;
         q += static_cast<long long>(gridDim.x - 1) * blockDim.x)
      input_chunk(p.in, q);
    return;
  }
  const int E = p.E, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  if (p.route) {
    if (warp < p.tokens)
      route_token(p.r, p.logits + static_cast<long long>(warp) * E, p.ids + static_cast<long long>(warp) * p.r.k,
                  p.weights + static_cast<long long>(warp) * p.r.k,
                  reinterpret_cast<float*>(sh) + warp * route_warp_floats(E));
    __syncthreads();  // the ids, in global memory, are read by all threads below
  }
  if (p.pairs <= 32) {
    if (warp == 0) sort_pairs_warp(p);
    return;
  }
  // count [E] | base [E] | first tile [E] | warp sums [2, kSortWarps] | warp_count [kSortWarps, E]
  int* cnt = sh;
  int* base = sh + E;
  int* tstart = sh + 2 * E;
  int* wsum = sh + 3 * E;
  int* warp_count = wsum + 2 * kSortWarps;
  for (int e = tid; e < E; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  count_chunk(p.ids, 0, p.pairs, E, cnt);
  __syncthreads();
  // exclusive scan of (rows, tiles) over the experts: each thread a run of consecutive experts,
  // a warp scan of the runs, then the warps' totals
  const int tr = p.tile_rows;
  const int per = (E + kSortThreads - 1) / kSortThreads;
  const int e0 = min(E, tid * per), e1 = min(E, e0 + per);
  int rows = 0, tiles = 0;
  for (int e = e0; e < e1; ++e) rows += cnt[e], tiles += (cnt[e] + tr - 1) / tr;
  int ir = rows, it = tiles;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int a = __shfl_up_sync(0xffffffffu, ir, off), b = __shfl_up_sync(0xffffffffu, it, off);
    if (lane >= off) ir += a, it += b;
  }
  if (lane == 31) wsum[warp] = ir, wsum[kSortWarps + warp] = it;
  __syncthreads();
  int pr = ir - rows, pt = it - tiles, total_tiles = 0;
  for (int w = 0; w < kSortWarps; ++w) {
    if (w < warp) pr += wsum[w], pt += wsum[kSortWarps + w];
    total_tiles += wsum[kSortWarps + w];
  }
  for (int e = e0; e < e1; ++e) {
    base[e] = pr;
    tstart[e] = pt;
    pr += cnt[e];
    pt += (cnt[e] + tr - 1) / tr;
  }
  __syncthreads();
  for (int e = tid; e < E; e += blockDim.x) put_expert_tiles(p.tile_info, e, cnt[e], base[e], tstart[e], tr);
  for (int q = total_tiles + tid; q < p.tiles_max; q += blockDim.x) put_tile(p.tile_info, q, -1, 0, 0);
  scatter_chunk(p.ids, 0, p.pairs, E, base, warp_count, p.sorted_pair, p.pos_of_pair);
}

// The shared expert's slot: one warp per token; lanes sum strided partial dot products in double,
// then a fixed butterfly adds them, so the gate is the same from run to run.
__global__ void shared_slot(const void* __restrict__ hidden, bool hidden_bf16, long long ld, int tokens, int H,
                            const float* __restrict__ gate, std::int32_t* __restrict__ ids, float* __restrict__ weights) {
  const int lane = threadIdx.x & 31;
  const long long t = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (t >= tokens) return;
  float w = 1.0f;
  if (gate != nullptr) {
    double z = 0.0;
    for (int c = lane; c < H; c += 32) z += static_cast<double>(load_input(hidden, hidden_bf16, t * ld + c)) * gate[c];
    for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
    w = 1.0f / (1.0f + expf(-static_cast<float>(z)));
  }
  if (lane == 0) {
    ids[t] = 0;
    weights[t] = w;
  }
}

// ---------------------------------------------------------------------------------------------
// The grouped GEMMs: C[rows of one expert, N] = A[rows, K] · W_e[N, K]ᵀ on mma.sync m16n8k16
// (bf16 in, fp32 accumulation), a cp.async pipeline of STAGES stages of BK columns.

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* smem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
// One m16n8 tile, D = A·B + C in place: bf16 m16n8k16, or m16n8k32 on E4M3 codes, whose fragments
// hold the same bytes as m16n8k16's on bf16 (four codes a register where bf16 holds two values), so
// the same ldmatrix addresses load them.
#define POLYMOE_MMA_SYNC(SHAPE_AND_TYPES)                                                                  \
  asm volatile("mma.sync.aligned." SHAPE_AND_TYPES " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "     \
               "{%0, %1, %2, %3};\n"                                                                       \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  POLYMOE_MMA_SYNC("m16n8k16.row.col.f32.bf16.bf16.f32");
}
__device__ __forceinline__ void mma_e4m3(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  POLYMOE_MMA_SYNC("m16n8k32.row.col.f32.e4m3.e4m3.f32");
}
#undef POLYMOE_MMA_SYNC
// The first k32 step of E4M3 sums (C = 0).
__device__ __forceinline__ void mma_e4m3_first(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

// ---------------------------------------------------------------------------------------------
// 4-bit weights (E2M1 codes with block scales), decoded to bf16 in registers. Every decoded value
// is exact: an E2M1 value times 2^(c-127) (MXFP4) or times an E4M3 value (NVFP4, whose scale_2
// multiplies the fp32 sums instead) needs at most 6 significant bits, and bf16 has fp32's exponent
// range.

__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ unsigned hmul2_bf16(unsigned a, unsigned b) {
  const __nv_bfloat162 r =
      __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<const unsigned*>(&r);
}

// Four E2M1 codes (nibbles 0..3 of u: elements k, k+1, k+8, k+9 of a k16 step) times one scale
// (bf16 in both halves of `scale`): b0 holds k and k+1, b1 k+8 and k+9, as mma's B fragment.
// The magnitudes index two byte tables (low and high byte of the bf16 of 0, 0.5, 1, 1.5, 2, 3, 4,
// 6) with prmt; the sign bits are replicated from the codes' bytes by prmt's sign mode.
__device__ __forceinline__ void e2m1x4_to_bf16(unsigned u, unsigned scale, unsigned& b0, unsigned& b1) {
  const unsigned m = u & 0x7777u;
  const unsigned lo = prmt(0xC0800000u, 0xC0804000u, m);
  const unsigned hi = prmt(0x3F3F3F00u, 0x40404040u, m);
  const unsigned x = u << 4;  // the signs of nibbles 0 and 2 to the top of bytes 0 and 1
  const unsigned v0 = prmt(lo, hi, 0x5140u) | (prmt(x, u, 0xC080u) & 0x80008000u);
  const unsigned v1 = prmt(lo, hi, 0x7362u) | (prmt(x, u, 0xD090u) & 0x80008000u);
  b0 = hmul2_bf16(v0, scale);
  b1 = hmul2_bf16(v1, scale);
}

// The bf16 of an E8M0 scale code c, 2^(c-127), in both halves (c = 0: the subnormal 2^-127).
__device__ __forceinline__ unsigned e8m0_bf16x2(unsigned c) {
  const unsigned b = c != 0 ? c << 7 : 0x40u;
  return b | (b << 16);
}
// The bf16 of an E4M3 code (never NaN: the loaders refuse it), in both halves.
__device__ __forceinline__ unsigned e4m3_bf16x2(unsigned c) {
  const unsigned e = (c >> 3) & 0xFu, mant = c & 7u;
  const float f = e != 0 ? __uint_as_float(((e + 120u) << 23) | (mant << 20)) : static_cast<float>(mant) * 0.001953125f;
  const unsigned b = (__float_as_uint(f) >> 16) | ((c & 0x80u) << 8);
  return b | (b << 16);
}

// The activations, as include/polymoe/core/activation.hpp computes them.
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float relu2(float x) { return x > 0.0f ? x * x : 0.0f; }
__device__ __forceinline__ float swiglu_oai(float g, float u, float alpha, float limit) {
  g = fminf(g, limit);
  u = fminf(fmaxf(u, -limit), limit);
  return g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
}
__device__ __forceinline__ float gated(act_kind k, float g, float u, float alpha, float limit) {
  switch (k) {
    case act_kind::gelu_gated: return gelu_erf(g) * u;
    case act_kind::swiglu_oai: return swiglu_oai(g, u, alpha, limit);
    default: return silu(g) * u;
  }
}
__device__ __forceinline__ float plain(act_kind k, float x) { return k == act_kind::relu2 ? relu2(x) : silu(x); }

struct gemm_params {
  const std::uint16_t* A;  ///< GEMM 1: x [T, K] by token; GEMM 2: h [pairs, K] by sorted row (e4m3: codes)
  const void* W;           ///< [E, N, K] bf16 or E4M3, or [E, N, K/2] E2M1 pairs (weights_view)
  const std::uint8_t* S;   ///< 4-bit formats: [E, K/64, N] block scale codes
  const float* G;          ///< nvfp4: [E] scale_2
  const float* SA;         ///< e4m3: A's scales [rows of A, K/128]
  const float* SW;         ///< e4m3: W's scales [E, K/128, N/8] (one for 8 rows)
  const float* bias;       ///< [E, N] or null
  int N, K;                ///< padded
  int k;                   ///< slots per token (GEMM 1: the token of pair i is i / k)
  const int* tile_info;    ///< [row tiles, 4]: expert (-1: none), first sorted row, rows
  const int* sorted_pair;
  bool rows_on_y;          ///< grid: column tiles on x and row tiles on y, else the other way
  // GEMM 1
  std::uint16_t* h;
  float* hf;  ///< e4m3: the intermediate in fp32 (quantized by the next launch)
  int ldh;
  act_kind act;
  float alpha, limit;
  bool gated;
  // GEMM 2
  float* y;
  int H;
  long long ldy;
  const int* y_row;      ///< [T·k] the row of y of each pair (pair mode), or null: y's rows are the sorted rows
  const float* weights;  ///< [T·k] routing weights, or null when they multiplied the input
  // GEMM 2 of E4M3 quantizing its own rows (own_rows): hf [pairs, ldh] fp32 of qcols columns
  int qcols;
  bool q_per_row;  ///< one scale a row, else one per 128 columns
};

// WK warps share each (row, column) warp tile, each taking WK-th of every stage's k steps; their
// sums are added in warp order after the loop (through the stages' shared memory), so the tile's
// result does not depend on timing.
template <int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_, int WK_ = 1>
struct tile_shape {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, STAGES = STAGES_, WK = WK_;
  static constexpr int threads = WM * WN * WK * 32;
  static constexpr int WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
  static constexpr int LDS = BK + 8;  // a row of a stage, padded: ldmatrix's 8 rows hit distinct banks
  static constexpr int CPR = BK / 8;  // 16-byte chunks a row
  static constexpr int A_PER = (BM * CPR + threads - 1) / threads;
  static constexpr int B_PER = BN * CPR / threads;
  static constexpr size_t smem() { return sizeof(std::uint16_t) * STAGES * (BM + BN) * LDS; }
  // 4-bit weights: a stage holds BN packed rows of BK/2 bytes (LDB apart: rows of 64 bytes padded
  // so that the 64-bit loads of a half-warp's four rows hit distinct banks) and their scale codes.
  static constexpr int LDB = BK == 64 ? 32 : BK / 2 + 32;
  static constexpr int QCPR = BK / 32;  // 16-byte chunks of a packed row a stage
  static constexpr int KC = BK / 64;    // 64-k units a stage
  static constexpr int QB_PER = BN * QCPR / threads;
  static constexpr size_t smem_q(int scale_bytes) {
    return sizeof(std::uint16_t) * STAGES * BM * LDS + static_cast<size_t>(STAGES) * BN * (LDB + KC * scale_bytes);
  }
  static_assert(WTM % 16 == 0 && WTN % 16 == 0 && BK % 16 == 0, "warp tiles of whole m16 and n16 blocks");
  static_assert((BK / 16) % WK == 0, "the k steps of a stage divide among the WK warps");
  // the partial sums of warps 1.. of each k set, after the loop, in the A stages (every format has them)
  static_assert(static_cast<size_t>(WK - 1) * MI * NI * 4 * WM * WN * 32 * sizeof(float) <=
                    sizeof(std::uint16_t) * STAGES * BM * LDS,
                "the k sets' partial sums fit the A stages");
  static_assert((BN * CPR) % threads == 0, "the weight tile divides among the threads");
  // a stage of more than the padding's k: the last stage of K may be half full (zero-filled)
  static constexpr bool kTail = pad % BK != 0;
  static_assert(pad % BN == 0 && (pad % BK == 0 || BK % pad == 0), "padded dimensions are whole tiles");
};
// Few rows an expert (decode): narrow column tiles, so that many blocks stream the weights, and
// deep pipelines, so that many bytes are in flight on each multiprocessor; the tiny tiles load 256
// bytes of each weight row a stage, which streamed faster than 128 bytes in twice the stages. Each
// stage's k steps are split over 4 warps a column set: a block's walk over K is one chain of
// dependent loads and decodes, and at one row an expert too few warps run for a multiprocessor to
// hide its latency.
using tiny_tiles = tile_shape<16, 32, 128, 1, 2, 4, 4>;
// 4-bit weights: the k steps over 2 warps (4 loaded each 64-k unit's codes twice, and was slower
// from 16 rows of a batch on)
using q4_tiny_tiles = tile_shape<16, 32, 128, 1, 2, 4, 2>;
// The deep tiles (4-bit): each stage 128 bytes of a weight row, so that a block's walk over K is
// half as many dependent steps. At one row an expert the GEMMs take about one wave of blocks, each
// bound by that walk's latency, not by the bytes; with more blocks than one wave holds, the larger
// stages' shared memory (fewer blocks a multiprocessor) costs more than the shorter walk gains.
// K may end in half a stage (zero-filled: kTail).
using q4_deep_tiles = tile_shape<16, 32, 256, 1, 2, 4, 2>;
using small_tiles = tile_shape<16, 64, 64, 1, 4, 6>;
// Many rows an expert (prefill): 64 columns of K a stage, so that half as many barriers and waits
// pace the loop as with 32; 3 stages keep two blocks (16 warps) on a multiprocessor.
using large_tiles = tile_shape<128, 128, 64, 2, 4, 3>;
// E4M3: a stage of BK 2-byte units is 2·BK k. The tiny tiles take 128 k a stage (K may be 128) in
// twice the stages; the large tiles take 16 warps of 32x32, whose two sets of accumulators (the
// sums of each 128 k apart) fit 128 registers, where 8 warps of 64x32 needed 255 and ran one block
// of 8 warps a multiprocessor.
// The E4M3 tiny tiles split each stage's four k32 steps over 4 warps, as bf16's are split (automatic
// choice takes the small tiles for E4M3 below 32 rows an expert).
using e4m3_tiny_tiles = tile_shape<16, 32, 64, 1, 2, 8, 4>;
using e4m3_large_tiles = tile_shape<128, 128, 64, 4, 4, 3>;

template <tiles T, wfmt WF>
struct shape_of {
  using type = small_tiles;
};
template <wfmt WF>
struct shape_of<tiles::tiny, WF> {
  using type = std::conditional_t<WF == wfmt::e4m3, e4m3_tiny_tiles,
                                  std::conditional_t<WF == wfmt::bf16, tiny_tiles, q4_tiny_tiles>>;
};
template <wfmt WF>
struct shape_of<tiles::deep, WF> {
  using type = std::conditional_t<WF == wfmt::mxfp4 || WF == wfmt::nvfp4, q4_deep_tiles,
                                  typename shape_of<tiles::tiny, WF>::type>;
};
template <wfmt WF>
struct shape_of<tiles::large, WF> {
  using type = std::conditional_t<WF == wfmt::e4m3, e4m3_large_tiles, large_tiles>;
};
// The wide tiles are bf16's and E4M3's (wide_gemm); the 4-bit formats take the large ones in their place.
template <wfmt WF>
struct shape_of<tiles::wide, WF> : shape_of<tiles::large, WF> {};
constexpr int bm_of(tiles t) {
  return t == tiles::tiny || t == tiles::deep ? tiny_tiles::BM
         : t == tiles::small                 ? small_tiles::BM
                                             : large_tiles::BM;  // wide: 128 too
}
static_assert(e4m3_tiny_tiles::BM == tiny_tiles::BM && q4_tiny_tiles::BM == tiny_tiles::BM &&
                  q4_deep_tiles::BM == tiny_tiles::BM &&
                  e4m3_large_tiles::BM == large_tiles::BM,
              "one row tile height a tile choice, whatever the format: the sort lays out the rows");

// Blocks a multiprocessor for the launch bounds. The large tiles are held to 16 warps (128
// registers a thread: two blocks of 8 warps, or one of 16): the 4-bit decode would otherwise take
// about 160 and leave one block of 8, a fifth slower at T=4096; E4M3 tiles whose two sets of
// accumulators need more than 64 registers get one block. The others are left unbounded (0).
template <class S, wfmt WF>
constexpr int min_blocks() {
  if (S::BM < 128) return 0;
  if (WF == wfmt::e4m3 && 2 * S::WTM * S::WTN / 32 > 64) return 1;
  return 512 / S::threads;
}

// The epilogue of a block's tile, for the warp whose accumulators these are. Accumulator q of
// block (mi, ni): row r0 + mi·16 + lane/4 (+8 for q >= 2), column c0 + ni·8 + (lane%4)·2 + q%2, the
// layout of mma.sync's m16n8 tiles and of wgmma's m64nN (per warp of the warpgroup). GEMM 1: the
// activation (gate and up columns interleaved by 8) into h; GEMM 2: bias and routing weight into
// y. kBounded: columns at N and beyond (a column tile past the padded width) are skipped.
template <bool GEMM1, bool Q8, bool kBounded, int MI, int NI>
__device__ __forceinline__ void store_tile(const gemm_params& p, const float (&acc)[MI][NI][4],
                                           const float (&wt)[MI][2], bool early_weights, int e, long long base,
                                           int rows, int r0, int c0, int lane) {
  const float* bias = p.bias ? p.bias + static_cast<long long>(e) * p.N : nullptr;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = r0 + mi * 16 + (lane >> 2) + half * 8;
      if (r >= rows) continue;
      const long long row = base + r;
      if constexpr (GEMM1) {
        std::uint16_t* hrow = p.h + row * p.ldh;
        if (p.gated) {
#pragma unroll
          for (int nj = 0; nj < NI / 2; ++nj) {
            const int n = c0 + nj * 16 + (lane & 3) * 2;  // gate column; up is n + 8
            if (kBounded && n >= p.N) continue;
            float v[2];
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              float g = acc[mi][2 * nj][half * 2 + c], u = acc[mi][2 * nj + 1][half * 2 + c];
              if (bias) {
                g += bias[n + c];
                u += bias[n + 8 + c];
              }
              v[c] = gated(p.act, g, u, p.alpha, p.limit);
            }
            const int j = (c0 + nj * 16) / 2 + (lane & 3) * 2;
            if constexpr (Q8) *reinterpret_cast<float2*>(p.hf + row * p.ldh + j) = make_float2(v[0], v[1]);
            else *reinterpret_cast<__nv_bfloat162*>(hrow + j) = __floats2bfloat162_rn(v[0], v[1]);
          }
        } else {
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) {
            const int j = c0 + ni * 8 + (lane & 3) * 2;
            if (kBounded && j >= p.N) continue;
            float v[2];
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              float x = acc[mi][ni][half * 2 + c];
              if (bias) x += bias[j + c];
              v[c] = plain(p.act, x);
            }
            if constexpr (Q8) *reinterpret_cast<float2*>(p.hf + row * p.ldh + j) = make_float2(v[0], v[1]);
            else *reinterpret_cast<__nv_bfloat162*>(hrow + j) = __floats2bfloat162_rn(v[0], v[1]);
          }
        }
      } else {
        float* yrow = p.y + (p.y_row ? static_cast<long long>(p.y_row[p.sorted_pair[row]]) : row) * p.ldy;
        const float wrow = early_weights ? wt[mi][half] : p.weights ? p.weights[p.sorted_pair[row]] : 1.0f;
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          const int c0n = c0 + ni * 8 + (lane & 3) * 2;
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            if (c0n + c >= p.H) continue;  // H <= N
            float v = acc[mi][ni][half * 2 + c];
            if (bias) v += bias[c0n + c];
            if (p.weights) v *= wrow;
            yrow[c0n + c] = v;
          }
        }
      }
    }
  }
}

// GEMM 2's own rows (E4M3): rows 0 .. rows - 1 of the row tile at sorted row `base`, from p.hf,
// as quantize_tiles quantizes them (the same codes and scales), into A [BM, ldq bytes] and its
// scales [K/128, BM] in shared memory; rows rows .. BM - 1 zero. Per-row scales: each row's groups
// are shared by W / rows warps where the block has more warps than rows (their amax meet in
// shared memory), else a warp a row; per-128 scales: a warp a (row, group).
template <class S>
__device__ void own_rows(const gemm_params& p, long long base, int rows, std::uint8_t* q, int ldq, float* sc) {
  constexpr int W = S::threads / 32;
  static_assert(W <= 32 && (W & (W - 1)) == 0, "W / rows warps a row divides the warps");
  __shared__ unsigned part[W];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int groups = p.K / 128;
  for (int i = tid; i < (S::BM - rows) * (ldq / 16); i += S::threads)
    reinterpret_cast<uint4*>(q + rows * ldq)[i] = make_uint4(0u, 0u, 0u, 0u);
  for (int i = tid; i < groups * S::BM; i += S::threads)
    if (i % S::BM >= rows) sc[i] = 0.0f;
  quant_rows r{};
  r.src = p.hf + base * p.ldh;
  r.vec = true;
  r.ld = p.ldh;
  r.cols = p.qcols;
  r.cp = p.K;
  if (!p.q_per_row) {
    for (int it = warp; it < rows * groups; it += W) {
      const int row = it / groups, g = it % groups;
      unsigned a, bad;
      quant_amax(r, row, g, g + 1, 1, lane, a, bad);
      quant_store_to(r, row, g, g + 1, 1, a, bad, lane, q, ldq, sc, 1, S::BM);
    }
    return;
  }
  const int P = rows < W ? W / rows : 1, team = warp / P, m = warp % P;
  for (int r0 = 0; r0 < rows; r0 += W / P) {  // one pass when P > 1 (the barrier below)
    const int row = r0 + team;
    const bool active = row < rows;
    unsigned a = 0, bad = 0;
    if (active) quant_amax(r, row, m, groups, P, lane, a, bad);
    if (P > 1) {
      if (lane == 0) part[warp] = a | bad << 31;  // a: a float's bits, below 2^31
      __syncthreads();
      unsigned t = 0;
      for (int j = 0; j < P; ++j) t = max(t, part[team * P + j]);
      a = t & 0x7fffffffu, bad = t >> 31;
    }
    if (active) quant_store_to(r, row, m, groups, P, a, bad, lane, q, ldq, sc, 1, S::BM);
  }
}

// OWN (GEMM 2 of E4M3, one k set): the block quantizes its row tile's intermediate rows (fp32,
// p.hf) itself, into shared memory that holds all of K (own_rows), and loads only the weights:
// no launch of quantize_tiles between the GEMMs, for batches of few rows, where that launch and
// its wait are a tenth of the forward. Each column tile's block repeats the same quantization.
template <class S, bool GEMM1, wfmt WF, bool OWN = false>
__global__ void __launch_bounds__(S::threads, min_blocks<S, WF>()) grouped_gemm(const gemm_params p) {
  constexpr bool Q4 = WF == wfmt::mxfp4 || WF == wfmt::nvfp4;
  constexpr bool Q8 = WF == wfmt::e4m3;
  static_assert(!OWN || (Q8 && !GEMM1 && S::WK == 1), "own rows: GEMM 2 of E4M3, one k set");
  static_assert(!Q4 || (S::BK % 64 == 0 && (S::BN * S::QCPR) % S::threads == 0), "4-bit stages of whole 64-k units");
  static_assert(!Q8 || S::BK == 64, "E4M3 stages of one 128-k block");
  constexpr int SB = WF == wfmt::mxfp4 ? 2 : 4;  // scale_bytes(WF), a host function
  extern __shared__ __align__(16) unsigned char smem_raw[];
  std::uint16_t* sA = reinterpret_cast<std::uint16_t*>(smem_raw);
  // OWN: A is [BM, lda] 2-byte units, all of K (lda = K/2 + 8: rows 16 bytes past a multiple of
  // 128, as LDS is), and its scales [K/128, BM] follow the weights' stages
  const int lda = OWN ? p.K / 2 + 8 : S::LDS;
  std::uint16_t* sB = sA + (OWN ? S::BM * lda : S::STAGES * S::BM * S::LDS);
  // 4-bit: packed rows [STAGES, BN, LDB] bytes, then scale codes [STAGES, KC, BN, SB]
  unsigned char* sQ = reinterpret_cast<unsigned char*>(sB);
  unsigned char* sS = sQ + S::STAGES * S::BN * S::LDB;
  // E4M3: the scales of each stage's 128 k, [STAGES, BM] of A's rows then [STAGES, BN/8] of W's
  float* sSA = reinterpret_cast<float*>(sB + S::STAGES * S::BN * S::LDS);
  float* sSW = sSA + (OWN ? p.K / 128 : S::STAGES) * S::BM;

  // GEMM 1 reads the tile map of the kernel just before it. GEMM 2 reads it before waiting for
  // GEMM 1: the map was complete when GEMM 1's blocks passed their own wait, before any of them let
  // GEMM 2 start; so GEMM 2's weights stream while GEMM 1 finishes.
  if constexpr (GEMM1) {
    griddep_wait();
    griddep_launch();
  }
  const int4 ti = reinterpret_cast<const int4*>(p.tile_info)[p.rows_on_y ? blockIdx.y : blockIdx.x];
  if (ti.x < 0) {  // no such row tile for this routing
    if constexpr (!GEMM1) griddep_wait();
    return;
  }
  const int e = ti.x;
  const int rows = ti.z;
  const long long base = ti.y;
  const int n0 = (p.rows_on_y ? blockIdx.x : blockIdx.y) * S::BN;
  const int K = p.K;
  const int KU = Q8 ? K / 2 : K;  // a row of A (and of bf16 or E4M3 weights) in 16-byte chunks' 2-byte units
  const int tid = threadIdx.x;

  constexpr int B_N = Q4 ? S::QB_PER : S::B_PER;
  const unsigned char* b_src[B_N];
  int b_dst[B_N];
  int b_k[B_N];  // the chunk's first k within a stage (kTail)
  if constexpr (Q4) {
    const unsigned char* W = static_cast<const unsigned char*>(p.W) + (static_cast<long long>(e) * p.N + n0) * (K / 2);
#pragma unroll
    for (int q = 0; q < B_N; ++q) {
      const int idx = tid + q * S::threads;
      const int r = idx / S::QCPR, c = idx % S::QCPR;
      b_dst[q] = r * S::LDB + c * 16;
      b_src[q] = W + static_cast<long long>(r) * (K / 2) + c * 16;
      b_k[q] = c * 32;
    }
  } else {
    const std::uint16_t* W = static_cast<const std::uint16_t*>(p.W) + (static_cast<long long>(e) * p.N + n0) * KU;
#pragma unroll
    for (int q = 0; q < B_N; ++q) {
      const int idx = tid + q * S::threads;
      const int r = idx / S::CPR, c = idx % S::CPR;
      b_dst[q] = (r * S::LDS + c * 8) * 2;
      b_src[q] = reinterpret_cast<const unsigned char*>(W + static_cast<long long>(r) * KU + c * 8);
      b_k[q] = c * 8;
    }
  }
  // 4-bit: the scale codes of the BN rows for each 64-k unit are contiguous ([E, K/64, N])
  const unsigned char* s_src = Q4 ? p.S + (static_cast<long long>(e) * (K / 64) * p.N + n0) * SB : nullptr;
  const int nkb = K / 128;  // E4M3: 128-k blocks (one a stage)
  const float* sw_src = Q8 ? p.SW + (static_cast<long long>(e) * nkb * p.N + n0) / 8 : nullptr;
  auto load_b = [&](int stage, int kt) {
    if constexpr (Q4) {
      unsigned char* b = sQ + stage * S::BN * S::LDB;
#pragma unroll
      for (int q = 0; q < B_N; ++q) {
        const bool in = !S::kTail || kt * S::BK + b_k[q] < K;  // past K: zeros, from a valid address
        cp_async16(b + b_dst[q], b_src[q] + (in ? kt * (S::BK / 2) : 0), in);
      }
      constexpr int pieces = S::BN * SB / 16;  // 16-byte pieces of one unit's codes
      unsigned char* sc = sS + stage * S::KC * S::BN * SB;
      for (int idx = tid; idx < S::KC * pieces; idx += S::threads) {
        const int j = idx / pieces, piece = idx % pieces;
        const bool in = !S::kTail || (kt * S::KC + j) * 64 < K;
        cp_async16(sc + j * S::BN * SB + piece * 16,
                   s_src + static_cast<long long>(in ? kt * S::KC + j : 0) * p.N * SB + piece * 16, in);
      }
    } else {
      unsigned char* b = reinterpret_cast<unsigned char*>(sB + stage * S::BN * S::LDS);
#pragma unroll
      for (int q = 0; q < B_N; ++q) {
        const bool in = !S::kTail || kt * S::BK + b_k[q] < KU;
        cp_async16(b + b_dst[q], b_src[q] + (in ? kt * S::BK * 2 : 0), in);
      }
      if constexpr (Q8)
        for (int idx = tid; idx < S::BN / 32; idx += S::threads)
          cp_async16(sSW + stage * (S::BN / 8) + idx * 4, sw_src + static_cast<long long>(kt) * (p.N / 8) + idx * 4, true);
    }
  };
  const int KT = S::kTail ? (KU + S::BK - 1) / S::BK : KU / S::BK;
  static_assert(!S::kTail || !Q8, "E4M3 stages are whole 128-k blocks");

  // The prologue's weights first, as one group with the rows below: the first iteration waits for
  // the whole prologue, later ones for their stage alone.
#pragma unroll
  for (int s = 0; s < S::STAGES - 1; ++s)
    if (s < KT) load_b(s, s);
  if constexpr (!GEMM1) {
    griddep_wait();  // the rows are GEMM 1's output
    griddep_launch();
  }
  if constexpr (OWN) own_rows<S>(p, base, rows, reinterpret_cast<std::uint8_t*>(sA), 2 * lda, sSA);

  const std::uint16_t* a_src[S::A_PER];
  bool a_ok[S::A_PER];
  int a_dst[S::A_PER];
#pragma unroll
  for (int q = 0; q < S::A_PER; ++q) {
    const int idx = tid + q * S::threads;
    const int r = idx / S::CPR, c = idx % S::CPR;
    a_ok[q] = idx < S::BM * S::CPR && r < rows;
    a_dst[q] = r * S::LDS + c * 8;
    long long row = 0;
    if (a_ok[q]) row = GEMM1 ? p.sorted_pair[base + r] / p.k : base + r;
    a_src[q] = p.A + row * KU + c * 8;
  }
  // E4M3: the scales of row `tid` of the tile (A is [rows, K/128]), loaded with each stage
  const float* sa_src = nullptr;
  if constexpr (Q8) {
    if (tid < S::BM && tid < rows)
      sa_src = p.SA + (GEMM1 ? static_cast<long long>(p.sorted_pair[base + tid] / p.k) : base + tid) * nkb;
  }
  auto load_a = [&](int stage, int kt) {
    if constexpr (OWN) return;
    std::uint16_t* a = sA + stage * S::BM * S::LDS;
    const int k0 = kt * S::BK;
#pragma unroll
    for (int q = 0; q < S::A_PER; ++q)
      if (tid + q * S::threads < S::BM * S::CPR) {
        const bool in = a_ok[q] && (!S::kTail || k0 + (tid + q * S::threads) % S::CPR * 8 < KU);
        cp_async16(a + a_dst[q], a_src[q] + (S::kTail && !in ? 0 : k0), in);
      }
    if constexpr (Q8)
      if (tid < S::BM) cp_async4(sSA + stage * S::BM + tid, sa_src ? sa_src + kt : p.SA, sa_src != nullptr);
  };
  auto load_stage = [&](int stage, int kt) {
    load_a(stage, kt);
    load_b(stage, kt);
  };
#pragma unroll
  for (int s = 0; s < S::STAGES - 1; ++s)
    if (s < KT) load_a(s, s);
  cp_async_commit();

  const int warp = tid >> 5, lane = tid & 31;
  constexpr int WMN = S::WM * S::WN;
  const int wk = S::WK == 1 ? 0 : warp / WMN, wmn = S::WK == 1 ? warp : warp % WMN;  // k set, and warp tile
  const int wm = wmn / S::WN, wn = wmn % S::WN;
  constexpr int KW = S::BK / 16 / S::WK;  // k steps of one warp a stage
  // GEMM 2's routing weights of the rows this thread writes: for row tiles of 16 (decode, short
  // loops) loaded now rather than after the loop; the large tiles keep the registers for the loop.
  constexpr bool kEarlyWeights = S::BM <= 16;
  float wt[S::MI][2];
#pragma unroll
  for (int mi = 0; mi < S::MI; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = wm * S::WTM + mi * 16 + (lane >> 2) + half * 8;
      wt[mi][half] = !GEMM1 && kEarlyWeights && p.weights && r < rows ? p.weights[p.sorted_pair[base + r]] : 1.0f;
    }
  float acc[S::MI][S::NI][4];
#pragma unroll
  for (int mi = 0; mi < S::MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < S::NI; ++ni)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;
  // E4M3: the products of each 128 k are summed in `part` on the tensor cores, then added to acc
  // times the scales of A's row and W's 8 rows for those 128 k (in fp32 on the CUDA cores).
  constexpr int QMI = Q8 ? S::MI : 1, QNI = Q8 ? S::NI : 1;
  float part[QMI][QNI][4];

  for (int kt = 0; kt < KT; ++kt) {
    if (kt == 0) cp_async_wait<0>();
    else cp_async_wait<S::STAGES - 2>();
    __syncthreads();
    const int next = kt + S::STAGES - 1;
    if (next < KT) load_stage(next % S::STAGES, next);
    cp_async_commit();
    const std::uint16_t* a = OWN ? sA + kt * S::BK : sA + (kt % S::STAGES) * S::BM * S::LDS;
    const std::uint16_t* b = sB + (kt % S::STAGES) * S::BN * S::LDS;
    const unsigned char* bq = sQ + (kt % S::STAGES) * S::BN * S::LDB;
    const unsigned char* bs = sS + (kt % S::STAGES) * S::KC * S::BN * SB;
    uint2 packed[S::NI];    // 4-bit: this thread's codes of one 64-k unit, per n8 block
    unsigned codes[S::NI];  // and their scale codes
#pragma unroll
    for (int kq = 0; kq < KW; ++kq) {
      const int kk = wk * KW + kq;
      unsigned af[S::MI][4];
      unsigned bf[S::NI][2];
#pragma unroll
      for (int mi = 0; mi < S::MI; ++mi)
        ldmatrix_x4(af[mi], a + (wm * S::WTM + mi * 16 + (lane & 15)) * lda + kk * 16 + (lane >> 4) * 8);
      if constexpr (Q4) {
        // B fragment: column n = lane/4 of each n8 block, k = 2q, 2q+1, 2q+8, 2q+9 (q = lane%4)
        const int j = kk / 4, s = kk % 4;
        if (kq == 0 || s == 0) {
#pragma unroll
          for (int ni = 0; ni < S::NI; ++ni) {
            const int n = wn * S::WTN + ni * 8 + (lane >> 2);
            packed[ni] = *reinterpret_cast<const uint2*>(bq + n * S::LDB + j * 32 + (lane & 3) * 8);
            codes[ni] = SB == 2 ? *reinterpret_cast<const std::uint16_t*>(bs + (j * S::BN + n) * 2)
                                : *reinterpret_cast<const unsigned*>(bs + (j * S::BN + n) * 4);
          }
        }
#pragma unroll
        for (int ni = 0; ni < S::NI; ++ni) {
          const unsigned u = (s < 2 ? packed[ni].x : packed[ni].y) >> (16 * (s & 1));
          const unsigned scale = WF == wfmt::mxfp4 ? e8m0_bf16x2((codes[ni] >> (8 * (s / 2))) & 0xFFu)
                                                   : e4m3_bf16x2((codes[ni] >> (8 * s)) & 0xFFu);
          e2m1x4_to_bf16(u, scale, bf[ni][0], bf[ni][1]);
        }
      } else {
#pragma unroll
        for (int nj = 0; nj < S::NI / 2; ++nj) {
          unsigned r[4];
          ldmatrix_x4(r, b + (wn * S::WTN + nj * 16 + (lane & 7) + (lane >> 4) * 8) * S::LDS + kk * 16 +
                             ((lane >> 3) & 1) * 8);
          bf[2 * nj][0] = r[0];
          bf[2 * nj][1] = r[1];
          bf[2 * nj + 1][0] = r[2];
          bf[2 * nj + 1][1] = r[3];
        }
      }
      if constexpr (Q8) {
#pragma unroll
        for (int mi = 0; mi < S::MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < S::NI; ++ni) {
            if (kq == 0) mma_e4m3_first(part[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
            else mma_e4m3(part[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
          }
        if (kq == KW - 1) {  // this warp's part of the stage's 128 k: its sums times their row's and n8 block's scales
          const float* sa = sSA + (OWN ? kt : kt % S::STAGES) * S::BM + wm * S::WTM + (lane >> 2);
          const float* sw = sSW + (kt % S::STAGES) * (S::BN / 8) + wn * (S::WTN / 8);
          float wsc[S::NI];
#pragma unroll
          for (int ni = 0; ni < S::NI; ++ni) wsc[ni] = sw[ni];
#pragma unroll
          for (int mi = 0; mi < S::MI; ++mi)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const float asc = sa[mi * 16 + half * 8];
#pragma unroll
              for (int ni = 0; ni < S::NI; ++ni) {
                const float sc = asc * wsc[ni];
#pragma unroll
                for (int c = 0; c < 2; ++c)
                  acc[mi][ni][half * 2 + c] = fmaf(part[mi][ni][half * 2 + c], sc, acc[mi][ni][half * 2 + c]);
              }
            }
        }
      } else {
#pragma unroll
        for (int mi = 0; mi < S::MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < S::NI; ++ni) mma_bf16(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
      }
    }
  }
  cp_async_wait<0>();
  if constexpr (S::WK > 1) {  // k sets 1.. hand their sums to set 0, which adds them in set order
    constexpr int PER = S::MI * S::NI * 4, T = WMN * 32;
    float* red = reinterpret_cast<float*>(smem_raw);  // [WK - 1][PER][T]: set, accumulator, thread
    const auto sum = [&](int i) -> float& { return acc[i / (S::NI * 4)][i / 4 % S::NI][i % 4]; };
    const auto at = [&](int w, int i) -> float& { return red[(w * PER + i) * T + wmn * 32 + lane]; };
    __syncthreads();  // every warp is done with the stages
    if (wk > 0) {
#pragma unroll
      for (int i = 0; i < PER; ++i) at(wk - 1, i) = sum(i);
    }
    __syncthreads();
    if (wk > 0) return;
#pragma unroll
    for (int w = 0; w < S::WK - 1; ++w)
#pragma unroll
      for (int i = 0; i < PER; ++i) sum(i) += at(w, i);
  }
  if constexpr (WF == wfmt::nvfp4) {  // the expert's scale_2, on the sums of E2M1 x E4M3 products
    const float g = p.G[e];
#pragma unroll
    for (int mi = 0; mi < S::MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < S::NI; ++ni)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[mi][ni][q] *= g;
  }

  store_tile<GEMM1, Q8, false>(p, acc, wt, kEarlyWeights, e, base, rows, wm * S::WTM, n0 + wn * S::WTN, lane);
}

// ---------------------------------------------------------------------------------------------
// The wide tiles (sm_90a): a block of two warpgroups computes 128 rows x 256 columns with wgmma,
// both operands read by the tensor cores from shared memory (no ldmatrix, no fragments in
// registers), the accumulators 128 registers a thread. A stage holds 64 k of A's 128 rows and of
// W's 256 rows, each row 128 bytes laid in the 128-byte swizzle wgmma reads (16-byte chunk c of
// row r at chunk c ^ (r % 8)), so that the cp.async stores and the tensor cores' reads both spread
// over the banks. Per column byte of the tile, a block reads a third less from L2 than the large
// tiles' 128 x 128, whose loop was bound by L2.

template <int STAGES_, int INFLIGHT_, int BN_ = 256>
struct wide_shape {
  static constexpr int BM = 128, BN = BN_, BK = 64, STAGES = STAGES_, threads = 256;
  static constexpr int NI = BN / 8;  // m16n8 column blocks of a warp's accumulators
  static constexpr int INFLIGHT = INFLIGHT_;           // wgmma groups left running past a step
  static constexpr int AHEAD = STAGES - 1 - INFLIGHT;  // steps loaded ahead
  static constexpr int ROW = BK * 2, CPR = ROW / 16;   // a row's bytes and 16-byte chunks
  // the 128-byte swizzle (wgmma's layout code 1), atoms of 8 rows
  static constexpr int SWIZZLE = 1, ATOM = 8 * ROW;
  static constexpr int A_BYTES = BM * ROW, B_BYTES = BN * ROW, STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr size_t smem() { return static_cast<size_t>(STAGES) * STAGE_BYTES + 1024; }  // + alignment to 1024
  // the 16-byte chunk c of row r
  __device__ static int at(int r, int c) { return r * ROW + ((c ^ (r & 7)) << 4); }
};
// 64 k a stage, one wgmma group left running past each step, two steps loaded ahead: faster than
// 32 k in 8 stages (more barriers) and than no wgmma overlap with three ahead
// (decisions.md#cuda-wide-tiles).
using wide_tiles = wide_shape<4, 1>;
// E4M3: a stage's 64 units are one 128-k scale block; the block's sums (wgmma into `part`, 64
// registers at 128 columns) are folded into the accumulators with their scales once the stage's
// wgmma group is done, so none is left in flight, and the loads run further ahead instead.
using wide_e4m3_tiles = wide_shape<6, 0, 128>;
template <wfmt WF>
using wide_shape_of = std::conditional_t<WF == wfmt::e4m3, wide_e4m3_tiles, wide_tiles>;
static_assert(wide_tiles::BM == large_tiles::BM && wide_e4m3_tiles::BM == large_tiles::BM,
              "the sort lays out the rows in tiles of 128 for all");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define POLYMOE_WGMMA 1
#endif

// A shared-memory matrix descriptor for wgmma: K-major rows of S::ROW bytes in the swizzle of that
// width, 8-row groups S::ATOM bytes apart.
template <class S>
__device__ __forceinline__ unsigned long long wgmma_desc(const void* smem) {
  const unsigned long long a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  return ((a & 0x3FFFFull) >> 4) | (1ull << 16) | (static_cast<unsigned long long>(S::ATOM >> 4) << 32) |
         (static_cast<unsigned long long>(S::SWIZZLE) << 62);
}

// The accumulator operands of a wgmma, 16 registers (four m16n8 column blocks) from block i on.
#define POLYMOE_WGMMA_D4(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define POLYMOE_WGMMA_D16(i) \
  POLYMOE_WGMMA_D4(i), POLYMOE_WGMMA_D4(i + 1), POLYMOE_WGMMA_D4(i + 2), POLYMOE_WGMMA_D4(i + 3)
// D[64 x 256] += A[64 x 16] · B[256 x 16]ᵀ, bf16 in, fp32 accumulators; per warp of the
// warpgroup the accumulators are the m16n8 layout of 32 column blocks (d[ni][q]).
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[32][4], unsigned long long da, unsigned long long db) {
#ifdef POLYMOE_WGMMA
  asm volatile(
      "{\n.reg .pred d_in;\nsetp.ne.b32 d_in, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, d_in, 1, 1, 0, 0;\n}\n"
      : POLYMOE_WGMMA_D16(0), POLYMOE_WGMMA_D16(4), POLYMOE_WGMMA_D16(8), POLYMOE_WGMMA_D16(12),
        POLYMOE_WGMMA_D16(16), POLYMOE_WGMMA_D16(20), POLYMOE_WGMMA_D16(24), POLYMOE_WGMMA_D16(28)
      : "l"(da), "l"(db), "r"(1));  // d_in: D += A·B (the accumulators start at zero)
#endif
}
// D[64 x 128] (+)= A[64 x 32] · B[128 x 32]ᵀ on E4M3 codes, fp32 accumulators (the layout of
// wgmma_m64n256k16's, 16 column blocks); accumulate false: D = A·B.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[16][4], unsigned long long da, unsigned long long db,
                                                      bool accumulate) {
#ifdef POLYMOE_WGMMA
  asm volatile(
      "{\n.reg .pred d_in;\nsetp.ne.b32 d_in, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, d_in, 1, 1;\n}\n"
      : POLYMOE_WGMMA_D16(0), POLYMOE_WGMMA_D16(4), POLYMOE_WGMMA_D16(8), POLYMOE_WGMMA_D16(12)
      : "l"(da), "l"(db), "r"(accumulate ? 1 : 0));
#endif
}
#undef POLYMOE_WGMMA_D16
#undef POLYMOE_WGMMA_D4
__device__ __forceinline__ void wgmma_fence() {
#ifdef POLYMOE_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef POLYMOE_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifdef POLYMOE_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// The accumulators stay where the wgmma in flight writes them: no access moves across this.
template <int NI>
__device__ __forceinline__ void wgmma_hold(float (&d)[NI][4]) {
#pragma unroll
  for (int i = 0; i < NI; ++i)
#pragma unroll
    for (int q = 0; q < 4; ++q) asm volatile("" : "+f"(d[i][q])::"memory");
}
// The stage's cp.async stores (generic proxy) made visible to wgmma's reads (async proxy).
__device__ __forceinline__ void fence_proxy_async() {
#ifdef POLYMOE_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// bf16 and E4M3; rows as the large tiles lay them out (tile_info, 128 a tile). Persistent: a block
// per multiprocessor walks the tiles (row tile t / cols, column tile t % cols) gridDim.x apart, and
// its loads run AHEAD k steps ahead across tiles, so that the next tile's first stages stream
// while this one's epilogue writes (one block a multiprocessor: nothing else would cover it).
template <bool GEMM1, wfmt WF>
__global__ void __launch_bounds__(wide_tiles::threads, 1) wide_gemm(const gemm_params p, int cols, int total) {
#ifdef POLYMOE_WGMMA
  constexpr bool Q8 = WF == wfmt::e4m3;
  using S = wide_shape_of<WF>;
  static_assert(WF == wfmt::bf16 || Q8, "wide tiles: bf16 or E4M3");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) &
                                                         ~std::uintptr_t{1023});
  if constexpr (GEMM1) {
    griddep_wait();
    griddep_launch();
  }
  const int4* tile_info = reinterpret_cast<const int4*>(p.tile_info);
  const auto live = [&](int t) {  // the first tile from t on (gridDim.x apart) with rows, or total
    while (t < total && tile_info[t / cols].x < 0) t += gridDim.x;
    return t < total ? t : total;
  };
  int pt = live(blockIdx.x);  // the tile the loads are in, and their next k step
  if (pt >= total) {
    if constexpr (!GEMM1) griddep_wait();
    return;
  }
  const int K = Q8 ? p.K / 2 : p.K;  // a row in 2-byte units (E4M3: two codes a unit)
  const int KT = K / S::BK, tid = threadIdx.x;
  // E4M3: each stage's scales, [STAGES, BM] of A's rows then [STAGES, BN/8] of W's 8-row groups
  float* sSA = reinterpret_cast<float*>(smem + S::STAGES * S::STAGE_BYTES);
  float* sSW = sSA + S::STAGES * S::BM;
  const float* sa_src = nullptr;  // row tid's scales (a row of the tile), null past its rows
  const float* sw_src = nullptr;  // W's scales of this column tile, if tid < BN/32 holds a piece
  bool sw_ok = false;
  // CPR threads a row of CPR chunks (W's rows past N zero-filled)
  constexpr int B_PER = S::BN * S::CPR / S::threads, A_PER = S::BM * S::CPR / S::threads;
  constexpr int RPQ = S::threads / S::CPR;  // rows a q apart
  const int c = tid % S::CPR;
  const std::uint16_t* b_src[B_PER];
  bool b_ok[B_PER];
  const std::uint16_t* a_src[A_PER];
  bool a_ok[A_PER];
  const auto aim_b = [&](int t) {
    const int e = tile_info[t / cols].x, n0 = (t % cols) * S::BN;
    const std::uint16_t* W = static_cast<const std::uint16_t*>(p.W) + static_cast<long long>(e) * p.N * K;
    if constexpr (Q8) {  // 16 bytes a thread: the scales of 32 columns, none past N
      sw_ok = tid < S::BN / 32 && n0 + tid * 32 < p.N;
      sw_src = p.SW + (static_cast<long long>(e) * KT * p.N + n0) / 8 + tid * 4;
    }
#pragma unroll
    for (int q = 0; q < B_PER; ++q) {
      const int r = tid / S::CPR + q * RPQ;
      b_ok[q] = n0 + r < p.N;
      b_src[q] = W + static_cast<long long>(b_ok[q] ? n0 + r : 0) * K + c * 8;
    }
  };
  const auto aim_a = [&](int t) {  // GEMM 1 reads the sort's pair order: after griddep_wait
    const int4 ti = tile_info[t / cols];
#pragma unroll
    for (int q = 0; q < A_PER; ++q) {
      const int r = tid / S::CPR + q * RPQ;
      a_ok[q] = r < ti.z;
      long long row = 0;
      if (a_ok[q]) row = GEMM1 ? p.sorted_pair[ti.y + r] / p.k : ti.y + r;
      a_src[q] = p.A + row * K + c * 8;
    }
    if constexpr (Q8) {
      sa_src = nullptr;
      if (tid < S::BM && tid < ti.z)
        sa_src = p.SA + (GEMM1 ? static_cast<long long>(p.sorted_pair[ti.y + tid] / p.k) : ti.y + tid) * KT;
    }
  };
  const auto load_b = [&](int stage, int kt) {
    unsigned char* st = smem + stage * S::STAGE_BYTES + S::A_BYTES;
#pragma unroll
    for (int q = 0; q < B_PER; ++q)
      cp_async16(st + S::at(tid / S::CPR + q * RPQ, c), b_src[q] + kt * S::BK, b_ok[q]);
    if constexpr (Q8)
      if (tid < S::BN / 32)
        cp_async16(sSW + stage * (S::BN / 8) + tid * 4, sw_ok ? sw_src + static_cast<long long>(kt) * (p.N / 8) : p.SW,
                   sw_ok);
  };
  const auto load_a = [&](int stage, int kt) {
    unsigned char* st = smem + stage * S::STAGE_BYTES;
#pragma unroll
    for (int q = 0; q < A_PER; ++q)
      cp_async16(st + S::at(tid / S::CPR + q * RPQ, c), a_src[q] + kt * S::BK, a_ok[q]);
    if constexpr (Q8)
      if (tid < S::BM) cp_async4(sSA + stage * S::BM + tid, sa_src ? sa_src + kt : p.SA, sa_src != nullptr);
  };
  // The first AHEAD steps, a group each: the first tile's (GEMM 2's weights before its wait, so
  // that they stream while GEMM 1 finishes), then the next tiles'.
  const int first = S::AHEAD < KT ? S::AHEAD : KT;
  aim_b(pt);
  for (int s = 0; s < first; ++s) load_b(s, s);
  if constexpr (!GEMM1) {
    griddep_wait();  // the rows are GEMM 1's output
    griddep_launch();
  }
  aim_a(pt);
  for (int s = 0; s < first; ++s) {
    load_a(s, s);
    cp_async_commit();
  }
  int pk = first, made = first;  // steps loaded
  const auto load_next = [&] {   // the next step, wherever it lies; a group (maybe empty)
    if (pk == KT) {
      pk = 0;
      pt = live(pt + gridDim.x);
      if (pt < total) {
        aim_b(pt);
        aim_a(pt);
      }
    }
    if (pt < total) {
      load_a(made % S::STAGES, pk);
      load_b(made % S::STAGES, pk);
      ++pk, ++made;
    }
    cp_async_commit();
  };
  for (int s = first; s < S::AHEAD; ++s) load_next();

  const int warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
  const float wt[1][2] = {{1.0f, 1.0f}};
  float acc[1][S::NI][4];
  float part[1][Q8 ? S::NI : 1][4];  // E4M3: one 128-k block's sums
  int used = 0;                       // steps computed
  for (int t = live(blockIdx.x); t < total; t = live(t + gridDim.x)) {
#pragma unroll
    for (int i = 0; i < S::NI; ++i)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[0][i][q] = 0.0f;
    for (int kt = 0; kt < KT; ++kt, ++used) {
      // this step's stage landed; the wgmma INFLIGHT + 1 steps back, which read the stage loaded
      // next, finished on every warp before this barrier
      cp_async_wait<S::AHEAD - 1>();
      fence_proxy_async();
      __syncthreads();
      load_next();
      const unsigned char* st = smem + (used % S::STAGES) * S::STAGE_BYTES;
      const unsigned long long da = wgmma_desc<S>(st + wg * 64 * S::ROW), db = wgmma_desc<S>(st + S::A_BYTES);
      wgmma_fence();
      if constexpr (Q8) {
        wgmma_hold(part[0]);
#pragma unroll
        for (int kk = 0; kk < S::BK / 16; ++kk)  // +32 bytes: 32 k a step
          wgmma_m64n128k32_e4m3(part[0], da + 2 * kk, db + 2 * kk, kk > 0);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_hold(part[0]);
        // the block's sums times the scales of their row and 8-row group of W, into fp32
        const float* sa = sSA + (used % S::STAGES) * S::BM + warp * 16 + (lane >> 2);
        const float* sw = sSW + (used % S::STAGES) * (S::BN / 8);
        const float asc[2] = {sa[0], sa[8]};
#pragma unroll
        for (int ni = 0; ni < S::NI; ++ni) {
          const float wsc = sw[ni];
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[0][ni][q] = fmaf(part[0][ni][q], asc[q >> 1] * wsc, acc[0][ni][q]);
        }
      } else {
        wgmma_hold(acc[0]);
#pragma unroll
        for (int kk = 0; kk < S::BK / 16; ++kk) wgmma_m64n256k16(acc[0], da + 2 * kk, db + 2 * kk);  // +32 bytes of k
        wgmma_commit();
        wgmma_wait<S::INFLIGHT>();
        wgmma_hold(acc[0]);
      }
    }
    wgmma_wait<0>();
    wgmma_hold(acc[0]);
    const int4 ti = tile_info[t / cols];
    store_tile<GEMM1, Q8, true>(p, acc, wt, false, ti.x, ti.y, ti.z, warp * 16, (t % cols) * S::BN, lane);
  }
  cp_async_wait<0>();
#else
  __trap();  // not an sm_90a build: the host never launches it (wide_tiles_run)
#endif
}

// ---------------------------------------------------------------------------------------------
// The top-k sum: out[t] = Σ_j y[row of (t, j)] in slot order, fp32, skipping slots not computed.

// out is fp32, or bf16 (out_bf16: the fp32 sum rounded once; with accumulate, out's value is added
// in fp32 first).
__global__ void topk_sum(const float* __restrict__ y, const int* __restrict__ pos_of_pair, int tokens, int k, int H,
                         void* __restrict__ out, long long ld_out, bool out_bf16, bool accumulate,
                         bool keep_uncomputed) {
  // pos_of_pair comes from the sort, complete before GEMM 2 (the kernel before this one) let this
  // one start: it may be read before the wait; y and out only after it.
  constexpr int kBatch = 8;  // slots whose rows are loaded together
  const long long n = static_cast<long long>(tokens) * H;
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  int pos0[kBatch];
  if (first < n) {
    const long long t = first / H;
#pragma unroll
    for (int j = 0; j < kBatch; ++j) pos0[j] = j < k ? pos_of_pair[t * k + j] : -1;
  }
  griddep_wait();
  griddep_launch();
  for (long long q = first; q < n; q += stride) {
    const long long t = q / H;
    const int c = static_cast<int>(q - t * H);
    float acc = 0.0f;
    bool any = false;
    for (int j0 = 0; j0 < k; j0 += kBatch) {
      int pos[kBatch];
      float v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        pos[j] = q == first && j0 == 0 ? pos0[j] : j0 + j < k ? pos_of_pair[t * k + j0 + j] : -1;
#pragma unroll
      for (int j = 0; j < kBatch; ++j) v[j] = pos[j] >= 0 ? y[static_cast<long long>(pos[j]) * H + c] : 0.0f;
#pragma unroll
      for (int j = 0; j < kBatch; ++j)  // in slot order
        if (pos[j] >= 0) acc += v[j], any = true;
    }
    if (keep_uncomputed && !any) continue;
    if (out_bf16) {
      std::uint16_t& o = static_cast<std::uint16_t*>(out)[t * ld_out + c];
      const float v = accumulate ? __uint_as_float(static_cast<unsigned>(o) << 16) + acc : acc;
      o = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    } else {
      float& o = static_cast<float*>(out)[t * ld_out + c];
      o = accumulate ? o + acc : acc;
    }
  }
}

template <class S, wfmt WF>
constexpr size_t smem_of() {
  if constexpr (WF == wfmt::e4m3) return S::smem() + sizeof(float) * S::STAGES * (S::BM + S::BN / 8);
  else if constexpr (WF == wfmt::bf16) return S::smem();
  else return S::smem_q(scale_bytes(WF));
}

// GEMM 2 quantizing its own rows (E4M3, the small tiles): A holds all of K. Used where that takes
// no more shared memory than the small tiles' A stages (K up to 768): as many blocks a
// multiprocessor as GEMM 2 after quantize_tiles (docs/decisions.md#cuda-e4m3-own-rows).
using own_tiles = small_tiles;
constexpr size_t kOwnSmemMax = smem_of<own_tiles, wfmt::e4m3>();
constexpr size_t own_smem(int K) {
  using S = own_tiles;
  return sizeof(std::uint16_t) * (static_cast<size_t>(S::BM) * (K / 2 + 8) + S::STAGES * S::BN * S::LDS) +
         sizeof(float) * (static_cast<size_t>(K / 128) * S::BM + S::STAGES * (S::BN / 8));
}
static_assert(own_smem(768) <= kOwnSmemMax && own_smem(896) > kOwnSmemMax);

template <class S, bool GEMM1, wfmt WF>
cudaError_t prepare_gemm_shape() {
  constexpr size_t smem = smem_of<S, WF>();
  static_assert(smem <= 227 * 1024);
  if constexpr (smem > 48 * 1024)
    return cudaFuncSetAttribute(grouped_gemm<S, GEMM1, WF>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(smem));
  return cudaSuccess;
}

template <tiles T, bool GEMM1, wfmt WF>
cudaError_t prepare_gemm() {
  return prepare_gemm_shape<typename shape_of<T, WF>::type, GEMM1, WF>();
}

// E4M3: each stage's 128 k also brings the scales of A's rows and of W's 8-row groups, as the
// large tiles' stages do
template <wfmt WF>
constexpr size_t wide_smem() {
  return smem_of<wide_shape_of<WF>, WF>();
}
template <bool GEMM1, wfmt WF>
cudaError_t prepare_wide() {
  static_assert(wide_smem<WF>() <= 227 * 1024);
  return cudaFuncSetAttribute(wide_gemm<GEMM1, WF>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(wide_smem<WF>()));
}

template <wfmt WF>
cudaError_t prepare_format() {
  if constexpr (WF == wfmt::e4m3) {
    const cudaError_t err = cudaFuncSetAttribute(grouped_gemm<own_tiles, false, WF, true>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kOwnSmemMax));
    if (err != cudaSuccess) return err;
  }
  cudaError_t err = prepare_gemm<tiles::tiny, true, WF>();
  if (err == cudaSuccess) err = prepare_gemm<tiles::tiny, false, WF>();
  if (err == cudaSuccess) err = prepare_gemm<tiles::small, true, WF>();
  if (err == cudaSuccess) err = prepare_gemm<tiles::small, false, WF>();
  if (err == cudaSuccess) err = prepare_gemm<tiles::large, true, WF>();
  if (err == cudaSuccess) err = prepare_gemm<tiles::large, false, WF>();
  if (err == cudaSuccess) err = prepare_gemm<tiles::deep, true, WF>();
  if (err == cudaSuccess) err = prepare_gemm<tiles::deep, false, WF>();
  return err;
}

// Column tiles on x, row tiles on y (up to 65535 row tiles, else the other way round). Few rows an
// expert: the blocks of the row tiles the routing leaves empty (the last ones of the map) come last
// and the working blocks spread evenly over the multiprocessors. Many rows an expert: the blocks of
// one row tile run together, so its input rows come from DRAM once and serve every column tile
// from L2 (with row tiles on x, each column tile read all the rows again: the intermediate of GEMM 2
// is larger than L2), while the few row tiles of an expert in flight share its weights in L2.
template <class S, bool GEMM1, wfmt WF, bool OWN = false>
cudaError_t launch_gemm(const gemm_params& p, int tiles_max, cudaStream_t stream) {
  const dim3 grid = p.rows_on_y ? dim3(p.N / S::BN, tiles_max) : dim3(tiles_max, p.N / S::BN);
  return launch_pdl(grouped_gemm<S, GEMM1, WF, OWN>, grid, dim3(S::threads), OWN ? own_smem(p.K) : smem_of<S, WF>(),
                    stream, p);
}

template <tiles T, bool GEMM1, wfmt WF>
cudaError_t launch_tiles(const gemm_params& p, int tiles_max, int sms, cudaStream_t stream) {
  if constexpr (T == tiles::wide && (WF == wfmt::bf16 || WF == wfmt::e4m3)) {
    using S = wide_shape_of<WF>;
    const int cols = (p.N + S::BN - 1) / S::BN;  // the last may be half past N
    const long long total = static_cast<long long>(cols) * tiles_max;
    if (total >= (1LL << 31)) return cudaErrorInvalidValue;
    const int grid = static_cast<int>(total < sms ? total : sms);
    return launch_pdl(wide_gemm<GEMM1, WF>, dim3(grid), dim3(S::threads), wide_smem<WF>(), stream, p, cols,
                      static_cast<int>(total));
  } else {
    return launch_gemm<typename shape_of<T, WF>::type, GEMM1, WF>(p, tiles_max, stream);
  }
}

int grid_for(long long n, int threads) {
  const long long b = (n + threads - 1) / threads;
  return static_cast<int>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

// The pairs the grids' row tiles must hold: every pair, or the caller's bound on those computed.
long long pairs_computed(const forward_args& a) {
  const long long pairs = static_cast<long long>(a.tokens) * a.k;
  return a.pair_bound > 0 && a.pair_bound < pairs ? a.pair_bound : pairs;
}

// E4M3: GEMM 2 on the small tiles quantizes its own rows (no quantize_tiles launch) up to this
// many pairs: the decode batches, whose row tiles hold a few rows each; each of a row tile's column
// blocks repeats its quantization (docs/decisions.md#cuda-e4m3-own-rows).
constexpr long long kOwnRowsPairs = 32;

template <tiles TILES, wfmt WF>
cudaError_t run_gemms(const geometry& g, const weights_view& w, const workspace_view& ws, const forward_args& a,
                      cudaStream_t stream, const char** step) {
  const int tiles_max = max_row_tiles(TILES, pairs_computed(a), g.experts);
  gemm_params p{};
  p.k = a.k;
  p.tile_info = ws.tile_info;
  p.rows_on_y = tiles_max <= 65535;
  p.sorted_pair = ws.sorted_pair;
  p.act = a.act;
  p.alpha = a.alpha;
  p.limit = a.limit;
  p.gated = g.gated;

  gemm_params p1 = p;
  p1.A = ws.x;
  p1.W = w.w13;
  p1.S = w.s13;
  p1.G = w.g13;
  p1.bias = w.b13;
  p1.N = g.r13p;
  p1.K = g.hp;
  p1.h = ws.h;
  p1.ldh = g.ip;
  if constexpr (WF == wfmt::e4m3) {
    p1.SA = ws.xs;
    p1.SW = w.t13;
    p1.hf = ws.hf;
  }
  *step = "GEMM 1 (grouped_gemm)";
  cudaError_t err = launch_tiles<TILES, true, WF>(p1, tiles_max, g.sms, stream);
  if (err != cudaSuccess) return err;

  gemm_params p2 = p;
  bool own = false;
  if constexpr (WF == wfmt::e4m3) {  // the intermediate rows of each row tile to E4M3
    own = TILES == tiles::small && pairs_computed(a) <= kOwnRowsPairs && own_smem(g.ip) <= kOwnSmemMax;
    if (own) {  // by GEMM 2 itself
      p2.hf = ws.hf;
      p2.ldh = g.ip;
      p2.qcols = g.inter;
      p2.q_per_row = w.act_group == 0;
    } else {
      const quant_rows q{ws.hf, false, true, g.ip, g.inter, g.ip, w.act_group == 0, nullptr,
                         reinterpret_cast<std::uint8_t*>(ws.h), ws.hs};
      *step = "quantize_tiles";
      err = launch_pdl(w.act_group == 0 ? quantize_tiles<true> : quantize_tiles<false>, dim3(tiles_max), dim3(256), 0,
                       stream, q, static_cast<const int*>(ws.tile_info));
      if (err != cudaSuccess) return err;
    }
    p2.SA = ws.hs;
    p2.SW = w.t2;
  }
  p2.A = ws.h;
  p2.W = w.w2;
  p2.S = w.s2;
  p2.G = w.g2;
  p2.bias = w.b2;
  p2.N = g.hp;
  p2.K = g.ip;
  p2.y = a.pair_rows ? static_cast<float*>(a.out) : ws.y;
  p2.H = g.hidden;
  p2.ldy = a.pair_rows ? a.ld_out : g.hidden;
  p2.y_row = a.pair_rows;
  p2.weights = a.weight_on_input ? nullptr : a.weights;
  *step = "GEMM 2 (grouped_gemm)";
  if constexpr (WF == wfmt::e4m3 && TILES == tiles::small)
    if (own) return launch_gemm<own_tiles, false, WF, true>(p2, tiles_max, stream);
  return launch_tiles<TILES, false, WF>(p2, tiles_max, g.sms, stream);
}

template <wfmt WF>
cudaError_t run_gemms_in(tiles t, const geometry& g, const weights_view& w, const workspace_view& ws,
                         const forward_args& a, cudaStream_t stream, const char** step) {
  switch (t) {
    case tiles::tiny: return run_gemms<tiles::tiny, WF>(g, w, ws, a, stream, step);
    case tiles::deep: return run_gemms<tiles::deep, WF>(g, w, ws, a, stream, step);
    case tiles::small: return run_gemms<tiles::small, WF>(g, w, ws, a, stream, step);
    case tiles::wide: return run_gemms<tiles::wide, WF>(g, w, ws, a, stream, step);
    default: return run_gemms<tiles::large, WF>(g, w, ws, a, stream, step);
  }
}

cudaError_t run_gemms_of(tiles t, wfmt f, const geometry& g, const weights_view& w, const workspace_view& ws,
                         const forward_args& a, cudaStream_t stream, const char** step) {
  switch (f) {
    case wfmt::mxfp4: return run_gemms_in<wfmt::mxfp4>(t, g, w, ws, a, stream, step);
    case wfmt::nvfp4: return run_gemms_in<wfmt::nvfp4>(t, g, w, ws, a, stream, step);
    case wfmt::e4m3: return run_gemms_in<wfmt::e4m3>(t, g, w, ws, a, stream, step);
    default: return run_gemms_in<wfmt::bf16>(t, g, w, ws, a, stream, step);
  }
}

}  // namespace

cudaError_t probe_kernels() {
  cudaFuncAttributes attr{};
  return cudaFuncGetAttributes(&attr, topk_sum);
}

cudaError_t prepare_kernels() {
  cudaError_t err = prepare_format<wfmt::bf16>();
  if (err == cudaSuccess) err = prepare_format<wfmt::mxfp4>();
  if (err == cudaSuccess) err = prepare_format<wfmt::nvfp4>();
  if (err == cudaSuccess) err = prepare_format<wfmt::e4m3>();
  if (err == cudaSuccess) err = prepare_wide<true, wfmt::bf16>();
  if (err == cudaSuccess) err = prepare_wide<false, wfmt::bf16>();
  if (err == cudaSuccess) err = prepare_wide<true, wfmt::e4m3>();
  if (err == cudaSuccess) err = prepare_wide<false, wfmt::e4m3>();
  return err;
}

int sort_blocks(long long pairs) { return static_cast<int>((pairs + kSortChunk - 1) / kSortChunk); }

int max_row_tiles(tiles t, long long pairs, int experts) {
  const int bm = bm_of(t);
  // every expert with rows adds at most one partial tile
  return static_cast<int>((pairs + bm - 1) / bm + (pairs < experts ? pairs : experts));
}

static_assert(q4_deep_tiles::BN == deep_tile_cols);

template <wfmt WF>
cudaError_t deep_blocks_of(int* blocks) {
  using S = q4_deep_tiles;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, grouped_gemm<S, true, WF>, S::threads, smem_of<S, WF>());
}

cudaError_t deep_blocks_per_sm(wfmt f, int* blocks) {
  *blocks = 0;
  if (f == wfmt::mxfp4) return deep_blocks_of<wfmt::mxfp4>(blocks);
  if (f == wfmt::nvfp4) return deep_blocks_of<wfmt::nvfp4>(blocks);
  return cudaSuccess;
}

int tile_entries(long long pairs, int experts) { return max_row_tiles(tiles::tiny, pairs, experts); }

cudaError_t launch_forward(const geometry& g, const weights_view& w, const workspace_view& ws, const forward_args& a,
                           tiles t, cudaStream_t stream, const char** step) {
  const long long pairs = static_cast<long long>(a.tokens) * a.k;
  if (pairs == 0) return cudaSuccess;
  const int E = g.experts;
  const int blocks = sort_blocks(pairs);
  const int tile_rows = bm_of(t);
  const int tiles_max = max_row_tiles(t, pairs_computed(a), E);
  std::int32_t* ids = const_cast<std::int32_t*>(a.ids);  // written only when a.route: the engine's own
  float* weights = const_cast<float*>(a.weights);
  cudaError_t err = cudaSuccess;

  input_rows in{};
  in.hidden = a.hidden;
  in.bf16 = a.hidden_bf16;
  const auto addr = reinterpret_cast<std::uintptr_t>(a.hidden);
  in.vec = addr % 16 == 0 && a.ld_hidden % (a.hidden_bf16 ? 8 : 4) == 0;
  in.ld = a.ld_hidden;
  in.H = g.hidden;
  in.hp = g.hp;
  in.weights = a.weight_on_input ? a.weights : nullptr;
  in.x = ws.x;
  // rows no slot computes (the masked format's padding) are neither read nor written
  in.only = a.keep_uncomputed && a.k == 1 ? a.ids : nullptr;
  // e4m3: the input rows as codes and scales instead (one warp a quant item)
  const bool quant = w.format == wfmt::e4m3;
  const quant_rows qin{a.hidden,
                       a.hidden_bf16,
                       addr % (a.hidden_bf16 ? 8 : 16) == 0 && a.ld_hidden % 4 == 0,
                       a.ld_hidden,
                       g.hidden,
                       g.hp,
                       w.act_group == 0,
                       in.weights,
                       reinterpret_cast<std::uint8_t*>(ws.x),
                       ws.xs,
                       in.only};
  const long long items = quant ? quant_items(qin, a.tokens) : static_cast<long long>(a.tokens) * (g.hp / 8);
  constexpr int kItemThreads = 256;
  const long long item_threads = quant ? items * 32 : items;

  if (blocks == 1) {
    // One launch: routing (a few tokens), sort, tile map and input rows.
    const size_t sort_smem = sizeof(int) * (static_cast<size_t>(3 + kSortWarps) * E + 2 * kSortWarps);
    const size_t route_smem = sizeof(float) * static_cast<size_t>(a.tokens) * route_warp_floats(E);
    const bool fuse_route = a.route != nullptr && a.tokens <= kSortWarps && !a.weight_on_input &&
                            route_smem <= 48 * 1024 && a.route->k <= kMaxK && a.route->n_group <= kMaxK;
    if (a.route != nullptr && !fuse_route) {
      *step = "route_kernel";
      if ((err = launch_route(*a.route, a.logits, a.tokens, ids, weights, stream)) != cudaSuccess) return err;
    }
    prep_params p{};
    if (fuse_route) p.r = *a.route;
    p.logits = a.logits;
    p.route = fuse_route;
    p.ids = ids;
    p.weights = weights;
    p.pairs = pairs;
    p.tokens = a.tokens;
    p.E = E;
    p.tile_rows = tile_rows;
    p.tiles_max = tiles_max;
    p.tile_info = ws.tile_info;
    p.sorted_pair = ws.sorted_pair;
    p.pos_of_pair = ws.pos_of_pair;
    p.in = in;
    p.qin = qin;
    p.quant = quant;
    p.items = items;
    const long long item_blocks = (item_threads + kItemThreads - 1) / kItemThreads;
    const int grid = 1 + static_cast<int>(item_blocks < 65535 ? item_blocks : 65535);
    *step = "decode_prep";
    // per-row scales of fewer rows than a block has warps: the warps of block 1 share each row
    const bool shared_rows = quant && qin.per_row && items < kSortWarps;
    err = launch_pdl(shared_rows ? decode_prep<true> : decode_prep<false>, dim3(grid), dim3(kSortThreads),
                     fuse_route && route_smem > sort_smem ? route_smem : sort_smem, stream, p);
  } else {
    if (a.route != nullptr) {
      *step = "route_kernel";
      if ((err = launch_route(*a.route, a.logits, a.tokens, ids, weights, stream)) != cudaSuccess) return err;
    }
    *step = "sort_count";
    err = launch_pdl(sort_count, dim3(blocks), dim3(kSortThreads), sizeof(int) * E, stream, a.ids, pairs, E, ws.hist);
    if (err != cudaSuccess) return err;
    *step = "sort_scan";
    err = launch_pdl(sort_scan, dim3(1), dim3(1024), 0, stream, blocks, E, tile_rows, tiles_max, ws.hist, ws.counts,
                     ws.offsets, ws.tile_start, ws.tile_info);
    if (err != cudaSuccess) return err;
    *step = "sort_scatter";
    err = launch_pdl(sort_scatter, dim3(blocks), dim3(kSortThreads), sizeof(int) * (1 + kSortWarps) * E, stream, a.ids,
                     pairs, E, ws.hist, ws.offsets, ws.sorted_pair, ws.pos_of_pair);
    if (err != cudaSuccess) return err;
    if (quant) {
      *step = "quantize_rows";
      err = launch_pdl(quantize_rows<false>, dim3(grid_for(item_threads, kItemThreads)), dim3(kItemThreads), 0, stream,
                       qin, items);
    } else {
      *step = "make_inputs";
      err = launch_pdl(make_inputs, dim3(grid_for(items, kItemThreads)), dim3(kItemThreads), 0, stream, in, items);
    }
  }
  if (err != cudaSuccess) return err;
  err = run_gemms_of(t, w.format, g, w, ws, a, stream, step);
  if (err != cudaSuccess || a.pair_rows) return err;  // pair mode: GEMM 2 wrote each pair's row of out
  *step = "topk_sum";
  return launch_pdl(topk_sum, dim3(grid_for(static_cast<long long>(a.tokens) * g.hidden, 256)), dim3(256), 0, stream,
                    ws.y, ws.pos_of_pair, a.tokens, a.k, g.hidden, a.out, a.ld_out, a.out_bf16, a.accumulate,
                    a.keep_uncomputed);
}

cudaError_t launch_quantize_e4m3(const void* src, bool src_bf16, long long ld_src, int rows, int cols, int group,
                                 std::uint8_t* codes, int cp, float* scales, cudaStream_t stream) {
  const auto addr = reinterpret_cast<std::uintptr_t>(src);
  const quant_rows r{src, src_bf16, addr % (src_bf16 ? 8 : 16) == 0 && ld_src % 4 == 0, ld_src, cols, cp, group == 0,
                     nullptr, codes, scales};
  const long long items = quant_items(r, rows);
  if (items == 0) return cudaSuccess;
  const bool shared_rows = r.per_row && items < 256 / 32;
  return launch_pdl(shared_rows ? quantize_rows<true> : quantize_rows<false>, dim3(grid_for(items * 32, 256)),
                    dim3(256), 0, stream, r, items);
}

__global__ void masked_slots(const std::int32_t* __restrict__ masked_m, int experts, int capacity,
                             std::int32_t* __restrict__ ids, float* __restrict__ weights,
                             std::int32_t* __restrict__ rows) {
  const long long n = static_cast<long long>(experts) * capacity;
  for (long long q = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; q < n;
       q += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int e = static_cast<int>(q / capacity), i = static_cast<int>(q - static_cast<long long>(e) * capacity);
    ids[q] = i < masked_m[e] ? e : -1;
    weights[q] = 1.0f;
    rows[q] = static_cast<std::int32_t>(q);
  }
}

cudaError_t launch_masked_slots(const std::int32_t* masked_m, int experts, int capacity, std::int32_t* ids,
                                float* weights, std::int32_t* rows, cudaStream_t stream) {
  const long long n = static_cast<long long>(experts) * capacity;
  if (n == 0) return cudaSuccess;
  masked_slots<<<grid_for(n, 256), 256, 0, stream>>>(masked_m, experts, capacity, ids, weights, rows);
  return cudaGetLastError();
}

__global__ void to_bf16(const float* __restrict__ src, long long ld_src, std::uint16_t* __restrict__ dst,
                        long long ld_dst, int rows, int cols) {
  const long long n = static_cast<long long>(rows) * cols;
  for (long long q = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; q < n;
       q += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long r = q / cols, c = q - r * cols;
    dst[r * ld_dst + c] = __bfloat16_as_ushort(__float2bfloat16_rn(src[r * ld_src + c]));
  }
}

cudaError_t launch_to_bf16(const float* src, long long ld_src, std::uint16_t* dst, long long ld_dst, int rows, int cols,
                           cudaStream_t stream) {
  const long long n = static_cast<long long>(rows) * cols;
  if (n == 0) return cudaSuccess;
  to_bf16<<<grid_for(n, 256), 256, 0, stream>>>(src, ld_src, dst, ld_dst, rows, cols);
  return cudaGetLastError();
}

cudaError_t launch_shared_slot(const void* hidden, bool hidden_bf16, long long ld_hidden, int tokens, int H,
                               const float* gate, std::int32_t* ids, float* weights, cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  const long long threads = static_cast<long long>(tokens) * 32;
  shared_slot<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(hidden, hidden_bf16, ld_hidden, tokens,
                                                                                H, gate, ids, weights);
  return cudaGetLastError();
}

}  // namespace polymoe::cuda::detail
