// The expert computation on the device: counting sort of the (token, slot) pairs by expert, the
// bf16 input rows, GEMM 1 with the activation in its epilogue, GEMM 2 with the routing weight,
// and the top-k sum. Every launch is sized for the worst case of the routing (T·k rows), so the
// host never needs the routing's counts; blocks without work return at once.
#include <cstdint>

#include <cuda_bf16.h>

#include "launch.hpp"

namespace polymoe::cuda::detail {
namespace {

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
__device__ void count_chunk(const std::int32_t* ids, long long first, long long pairs, int E, int* sh) {
  for (int it = 0; it < kSortIters; ++it) {
    const int e = valid_id(ids, first + it * kSortThreads + threadIdx.x, pairs, E);
    if (e >= 0) atomicAdd(&sh[e], 1);
  }
}

// Places the block's chunk of pairs, stably: `base[e]` is the first sorted row of expert e for this
// chunk (advanced here); warp_count is [kSortWarps, E] of shared memory.
__device__ void scatter_chunk(const std::int32_t* ids, long long first, long long pairs, int E, int* base,
                              int* warp_count, int* sorted_pair, int* pos_of_pair) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int it = 0; it < kSortIters; ++it) {
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
__global__ void sort_scan(int blocks, int E, int tile_rows, int* hist, int* counts, int* offsets, int* tile_start) {
  constexpr int kBatch = 8;  // loads in flight per thread
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
}

__global__ void sort_scatter(const std::int32_t* __restrict__ ids, long long pairs, int E,
                             const int* __restrict__ hist, const int* __restrict__ offsets,
                             int* __restrict__ sorted_pair, int* __restrict__ pos_of_pair) {
  extern __shared__ int sh[];  // base [E] | warp_count [kSortWarps, E]
  int* base = sh;
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    base[e] = offsets[e] + hist[static_cast<long long>(blockIdx.x) * E + e];
  __syncthreads();
  scatter_chunk(ids, static_cast<long long>(blockIdx.x) * kSortChunk, pairs, E, base, sh + E, sorted_pair,
                pos_of_pair);
}

// The three steps in one block, when the pairs fit one chunk (decode): two launches fewer.
__global__ void sort_single(const std::int32_t* __restrict__ ids, long long pairs, int E, int tile_rows,
                            int* __restrict__ counts, int* __restrict__ offsets, int* __restrict__ tile_start,
                            int* __restrict__ sorted_pair, int* __restrict__ pos_of_pair) {
  extern __shared__ int sh[];  // count [E] | base [E] | warp_count [kSortWarps, E]
  int* cnt = sh;
  int* base = sh + E;
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  count_chunk(ids, 0, pairs, E, cnt);
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) counts[e] = cnt[e];
  if (threadIdx.x == 0) {
    int rows = 0, tiles = 0;
    for (int e = 0; e < E; ++e) {
      offsets[e] = base[e] = rows;
      tile_start[e] = tiles;
      rows += cnt[e];
      tiles += (cnt[e] + tile_rows - 1) / tile_rows;
    }
    offsets[E] = rows;
    tile_start[E] = tiles;
  }
  __syncthreads();
  scatter_chunk(ids, 0, pairs, E, base, sh + 2 * E, sorted_pair, pos_of_pair);
}

// ---------------------------------------------------------------------------------------------
// Expert input rows: x[t] = bf16(hidden[t] (· weight of its one slot)), zero in the padding.

__device__ __forceinline__ float load_input(const void* hidden, bool bf16, long long i) {
  return bf16 ? __bfloat162float(__ushort_as_bfloat16(static_cast<const std::uint16_t*>(hidden)[i]))
              : static_cast<const float*>(hidden)[i];
}

__global__ void make_inputs(const void* __restrict__ hidden, bool hidden_bf16, long long ld, int tokens, int H, int hp,
                            const float* __restrict__ weights, bool weight_on_input, std::uint16_t* __restrict__ x) {
  const long long n = static_cast<long long>(tokens) * hp;
  for (long long q = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; q < n;
       q += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long t = q / hp;
    const int c = static_cast<int>(q - t * hp);
    float v = 0.0f;
    if (c < H) {
      v = load_input(hidden, hidden_bf16, t * ld + c);
      if (weight_on_input) v *= weights[t];  // top_k is 1: the token's one slot
    }
    x[q] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
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
__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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
  const std::uint16_t* A;  ///< GEMM 1: x [T, K] by token; GEMM 2: h [pairs, K] by sorted row
  const std::uint16_t* W;  ///< [E, N, K]
  const float* bias;       ///< [E, N] or null
  int N, K;                ///< padded
  int k;                   ///< slots per token (GEMM 1: the token of pair i is i / k)
  int E;
  const int* counts;
  const int* offsets;
  const int* tile_start;
  const int* sorted_pair;
  // GEMM 1
  std::uint16_t* h;
  int ldh;
  act_kind act;
  float alpha, limit;
  bool gated;
  // GEMM 2
  float* y;
  int H;
  const float* weights;  ///< [T·k] routing weights, or null when they multiplied the input
};

template <int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_>
struct tile_shape {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, STAGES = STAGES_;
  static constexpr int threads = WM * WN * 32;
  static constexpr int WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
  static constexpr int LDS = BK + 8;  // a row of a stage, padded: ldmatrix's 8 rows hit distinct banks
  static constexpr int CPR = BK / 8;  // 16-byte chunks a row
  static constexpr int A_PER = (BM * CPR + threads - 1) / threads;
  static constexpr int B_PER = BN * CPR / threads;
  static constexpr size_t smem = sizeof(std::uint16_t) * STAGES * (BM + BN) * LDS;
  static_assert(WTM % 16 == 0 && WTN % 16 == 0 && BK % 16 == 0, "warp tiles of whole m16 and n16 blocks");
  static_assert((BN * CPR) % threads == 0, "the weight tile divides among the threads");
  static_assert(pad % BN == 0 && pad % BK == 0, "padded dimensions are whole tiles");
};
// Few rows an expert (decode): narrow column tiles, so that many blocks stream the weights, and
// deep pipelines, so that many bytes are in flight on each multiprocessor.
using tiny_tiles = tile_shape<16, 32, 64, 1, 2, 8>;
using small_tiles = tile_shape<16, 64, 64, 1, 4, 6>;
using large_tiles = tile_shape<128, 128, 32, 2, 4, 4>;  // many rows an expert

template <tiles T>
struct shape_of;
template <>
struct shape_of<tiles::tiny> {
  using type = tiny_tiles;
};
template <>
struct shape_of<tiles::small> {
  using type = small_tiles;
};
template <>
struct shape_of<tiles::large> {
  using type = large_tiles;
};
constexpr int bm_of(tiles t) {
  return t == tiles::tiny ? tiny_tiles::BM : t == tiles::small ? small_tiles::BM : large_tiles::BM;
}

template <class S, bool GEMM1>
__global__ void __launch_bounds__(S::threads) grouped_gemm(const gemm_params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  std::uint16_t* sA = reinterpret_cast<std::uint16_t*>(smem_raw);
  std::uint16_t* sB = sA + S::STAGES * S::BM * S::LDS;

  const int tile = blockIdx.x;
  if (tile >= p.tile_start[p.E]) return;  // no such row tile for this routing
  int lo = 0, hi = p.E - 1;               // the expert: the last one whose first tile is <= tile
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (p.tile_start[mid] <= tile) lo = mid;
    else hi = mid - 1;
  }
  const int e = lo;
  const int m0 = (tile - p.tile_start[e]) * S::BM;
  const int rows = min(S::BM, p.counts[e] - m0);
  const long long base = static_cast<long long>(p.offsets[e]) + m0;
  const int n0 = blockIdx.y * S::BN;
  const int K = p.K;
  const std::uint16_t* W = p.W + (static_cast<long long>(e) * p.N + n0) * K;
  const int tid = threadIdx.x;

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
    a_src[q] = p.A + row * K + c * 8;
  }
  const std::uint16_t* b_src[S::B_PER];
  int b_dst[S::B_PER];
#pragma unroll
  for (int q = 0; q < S::B_PER; ++q) {
    const int idx = tid + q * S::threads;
    const int r = idx / S::CPR, c = idx % S::CPR;
    b_dst[q] = r * S::LDS + c * 8;
    b_src[q] = W + static_cast<long long>(r) * K + c * 8;
  }
  auto load_stage = [&](int stage, int kt) {
    std::uint16_t* a = sA + stage * S::BM * S::LDS;
    std::uint16_t* b = sB + stage * S::BN * S::LDS;
    const int k0 = kt * S::BK;
#pragma unroll
    for (int q = 0; q < S::A_PER; ++q)
      if (tid + q * S::threads < S::BM * S::CPR) cp_async16(a + a_dst[q], a_src[q] + k0, a_ok[q]);
#pragma unroll
    for (int q = 0; q < S::B_PER; ++q) cp_async16(b + b_dst[q], b_src[q] + k0, true);
  };

  const int KT = K / S::BK;
#pragma unroll
  for (int s = 0; s < S::STAGES - 1; ++s) {
    if (s < KT) load_stage(s, s);
    cp_async_commit();
  }

  const int warp = tid >> 5, lane = tid & 31;
  const int wm = warp / S::WN, wn = warp % S::WN;
  float acc[S::MI][S::NI][4];
#pragma unroll
  for (int mi = 0; mi < S::MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < S::NI; ++ni)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;

  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<S::STAGES - 2>();
    __syncthreads();
    const int next = kt + S::STAGES - 1;
    if (next < KT) load_stage(next % S::STAGES, next);
    cp_async_commit();
    const std::uint16_t* a = sA + (kt % S::STAGES) * S::BM * S::LDS;
    const std::uint16_t* b = sB + (kt % S::STAGES) * S::BN * S::LDS;
#pragma unroll
    for (int kk = 0; kk < S::BK / 16; ++kk) {
      unsigned af[S::MI][4];
      unsigned bf[S::NI][2];
#pragma unroll
      for (int mi = 0; mi < S::MI; ++mi)
        ldmatrix_x4(af[mi], a + (wm * S::WTM + mi * 16 + (lane & 15)) * S::LDS + kk * 16 + (lane >> 4) * 8);
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
#pragma unroll
      for (int mi = 0; mi < S::MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < S::NI; ++ni) mma_bf16(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
    }
  }
  cp_async_wait<0>();

  // Epilogue. Accumulator q of block (mi, ni): row wm·WTM + mi·16 + lane/4 (+8 for q >= 2),
  // column wn·WTN + ni·8 + (lane%4)·2 + q%2.
  const float* bias = p.bias ? p.bias + static_cast<long long>(e) * p.N : nullptr;
#pragma unroll
  for (int mi = 0; mi < S::MI; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = wm * S::WTM + mi * 16 + (lane >> 2) + half * 8;
      if (r >= rows) continue;
      const long long row = base + r;
      if constexpr (GEMM1) {
        std::uint16_t* hrow = p.h + row * p.ldh;
        if (p.gated) {
#pragma unroll
          for (int nj = 0; nj < S::NI / 2; ++nj) {
            const int n = n0 + wn * S::WTN + nj * 16 + (lane & 3) * 2;  // gate column; up is n + 8
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
            const int j = (n0 + wn * S::WTN + nj * 16) / 2 + (lane & 3) * 2;
            *reinterpret_cast<__nv_bfloat162*>(hrow + j) = __floats2bfloat162_rn(v[0], v[1]);
          }
        } else {
#pragma unroll
          for (int ni = 0; ni < S::NI; ++ni) {
            const int j = n0 + wn * S::WTN + ni * 8 + (lane & 3) * 2;
            float v[2];
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              float x = acc[mi][ni][half * 2 + c];
              if (bias) x += bias[j + c];
              v[c] = plain(p.act, x);
            }
            *reinterpret_cast<__nv_bfloat162*>(hrow + j) = __floats2bfloat162_rn(v[0], v[1]);
          }
        }
      } else {
        float* yrow = p.y + row * p.H;
        const float wt = p.weights ? p.weights[p.sorted_pair[row]] : 1.0f;
#pragma unroll
        for (int ni = 0; ni < S::NI; ++ni) {
          const int c0 = n0 + wn * S::WTN + ni * 8 + (lane & 3) * 2;
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            if (c0 + c >= p.H) continue;
            float v = acc[mi][ni][half * 2 + c];
            if (bias) v += bias[c0 + c];
            if (p.weights) v *= wt;
            yrow[c0 + c] = v;
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The top-k sum: out[t] = Σ_j y[row of (t, j)] in slot order, fp32, skipping slots not computed.

__global__ void topk_sum(const float* __restrict__ y, const int* __restrict__ pos_of_pair, int tokens, int k, int H,
                         float* __restrict__ out, long long ld_out, bool accumulate, bool keep_uncomputed) {
  const long long n = static_cast<long long>(tokens) * H;
  for (long long q = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; q < n;
       q += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long t = q / H;
    const int c = static_cast<int>(q - t * H);
    float acc = 0.0f;
    bool any = false;
    for (int j = 0; j < k; ++j) {
      const int p = pos_of_pair[t * k + j];
      if (p >= 0) acc += y[static_cast<long long>(p) * H + c], any = true;
    }
    if (keep_uncomputed && !any) continue;
    float& o = out[t * ld_out + c];
    o = accumulate ? o + acc : acc;
  }
}

template <class S, bool GEMM1>
cudaError_t prepare_gemm() {
  static_assert(S::smem <= 227 * 1024);
  if constexpr (S::smem > 48 * 1024)
    return cudaFuncSetAttribute(grouped_gemm<S, GEMM1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(S::smem));
  return cudaSuccess;
}

// Row tiles on x (up to 2^31 - 1 of them), column tiles on y; blocks of one column tile over
// consecutive row tiles run together and share that slice of each expert's weights in L2.
template <class S, bool GEMM1>
cudaError_t launch_gemm(const gemm_params& p, int tiles_max, cudaStream_t stream) {
  const dim3 grid(tiles_max, p.N / S::BN);
  grouped_gemm<S, GEMM1><<<grid, S::threads, S::smem, stream>>>(p);
  return cudaGetLastError();
}

int grid_for(long long n, int threads) {
  const long long b = (n + threads - 1) / threads;
  return static_cast<int>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

template <tiles TILES>
cudaError_t run_gemms(const geometry& g, const weights_view& w, const workspace_view& ws, const forward_args& a,
                      cudaStream_t stream, const char** step) {
  const long long pairs = static_cast<long long>(a.tokens) * a.k;
  using S = typename shape_of<TILES>::type;
  const int tiles_max = max_row_tiles(TILES, pairs, g.experts);
  gemm_params p{};
  p.k = a.k;
  p.E = g.experts;
  p.counts = ws.counts;
  p.offsets = ws.offsets;
  p.tile_start = ws.tile_start;
  p.sorted_pair = ws.sorted_pair;
  p.act = a.act;
  p.alpha = a.alpha;
  p.limit = a.limit;
  p.gated = g.gated;

  gemm_params p1 = p;
  p1.A = ws.x;
  p1.W = w.w13;
  p1.bias = w.b13;
  p1.N = g.r13p;
  p1.K = g.hp;
  p1.h = ws.h;
  p1.ldh = g.ip;
  *step = "GEMM 1 (grouped_gemm)";
  cudaError_t err = launch_gemm<S, true>(p1, tiles_max, stream);
  if (err != cudaSuccess) return err;

  gemm_params p2 = p;
  p2.A = ws.h;
  p2.W = w.w2;
  p2.bias = w.b2;
  p2.N = g.hp;
  p2.K = g.ip;
  p2.y = ws.y;
  p2.H = g.hidden;
  p2.weights = a.weight_on_input ? nullptr : a.weights;
  *step = "GEMM 2 (grouped_gemm)";
  return launch_gemm<S, false>(p2, tiles_max, stream);
}

}  // namespace

cudaError_t probe_kernels() {
  cudaFuncAttributes attr{};
  return cudaFuncGetAttributes(&attr, topk_sum);
}

cudaError_t prepare_kernels() {
  cudaError_t err = prepare_gemm<tiny_tiles, true>();
  if (err == cudaSuccess) err = prepare_gemm<tiny_tiles, false>();
  if (err == cudaSuccess) err = prepare_gemm<small_tiles, true>();
  if (err == cudaSuccess) err = prepare_gemm<small_tiles, false>();
  if (err == cudaSuccess) err = prepare_gemm<large_tiles, true>();
  if (err == cudaSuccess) err = prepare_gemm<large_tiles, false>();
  return err;
}

int sort_blocks(long long pairs) { return static_cast<int>((pairs + kSortChunk - 1) / kSortChunk); }

int max_row_tiles(tiles t, long long pairs, int experts) {
  const int bm = bm_of(t);
  // every expert with rows adds at most one partial tile
  return static_cast<int>((pairs + bm - 1) / bm + (pairs < experts ? pairs : experts));
}

cudaError_t launch_forward(const geometry& g, const weights_view& w, const workspace_view& ws, const forward_args& a,
                           tiles t, cudaStream_t stream, const char** step) {
  const long long pairs = static_cast<long long>(a.tokens) * a.k;
  if (pairs == 0) return cudaSuccess;
  const int E = g.experts;
  const int blocks = sort_blocks(pairs);
  const int tile_rows = bm_of(t);

  if (blocks == 1) {
    *step = "sort_single";
    sort_single<<<1, kSortThreads, sizeof(int) * (2 + kSortWarps) * E, stream>>>(
        a.ids, pairs, E, tile_rows, ws.counts, ws.offsets, ws.tile_start, ws.sorted_pair, ws.pos_of_pair);
  } else {
    *step = "sort_count";
    sort_count<<<blocks, kSortThreads, sizeof(int) * E, stream>>>(a.ids, pairs, E, ws.hist);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    *step = "sort_scan";
    sort_scan<<<1, 1024, 0, stream>>>(blocks, E, tile_rows, ws.hist, ws.counts, ws.offsets, ws.tile_start);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    *step = "sort_scatter";
    sort_scatter<<<blocks, kSortThreads, sizeof(int) * (1 + kSortWarps) * E, stream>>>(
        a.ids, pairs, E, ws.hist, ws.offsets, ws.sorted_pair, ws.pos_of_pair);
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  *step = "make_inputs";
  make_inputs<<<grid_for(static_cast<long long>(a.tokens) * g.hp, 256), 256, 0, stream>>>(
      a.hidden, a.hidden_bf16, a.ld_hidden, a.tokens, g.hidden, g.hp, a.weights, a.weight_on_input, ws.x);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  err = t == tiles::tiny    ? run_gemms<tiles::tiny>(g, w, ws, a, stream, step)
        : t == tiles::small ? run_gemms<tiles::small>(g, w, ws, a, stream, step)
                            : run_gemms<tiles::large>(g, w, ws, a, stream, step);
  if (err != cudaSuccess) return err;
  *step = "topk_sum";
  topk_sum<<<grid_for(static_cast<long long>(a.tokens) * g.hidden, 256), 256, 0, stream>>>(ws.y, ws.pos_of_pair,
                                                                                         a.tokens, a.k, g.hidden, a.out,
                                                                                         a.ld_out, a.accumulate,
                                                                                         a.keep_uncomputed);
  return cudaGetLastError();
}

__global__ void masked_slots(const std::int32_t* __restrict__ masked_m, int experts, int capacity,
                             std::int32_t* __restrict__ ids, float* __restrict__ weights) {
  const long long n = static_cast<long long>(experts) * capacity;
  for (long long q = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; q < n;
       q += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int e = static_cast<int>(q / capacity), i = static_cast<int>(q - static_cast<long long>(e) * capacity);
    ids[q] = i < masked_m[e] ? e : -1;
    weights[q] = 1.0f;
  }
}

cudaError_t launch_masked_slots(const std::int32_t* masked_m, int experts, int capacity, std::int32_t* ids,
                                float* weights, cudaStream_t stream) {
  const long long n = static_cast<long long>(experts) * capacity;
  if (n == 0) return cudaSuccess;
  masked_slots<<<grid_for(n, 256), 256, 0, stream>>>(masked_m, experts, capacity, ids, weights);
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
