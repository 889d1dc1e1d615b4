#pragma once
// Routing of one token by one warp, shared by the routing kernel (routing.cu) and the fused decode
// preparation (experts.cu). The arithmetic follows include/polymoe/core/routing.hpp step by step
// (the same fp32 operations in the same order; sums over experts and over the k selected are taken
// sequentially by one lane, in index order), and every top-k orders by (value descending, index
// ascending), as detail::topk_indices does, so the ids equal the CPU's.
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>

#include "launch.hpp"

namespace polymoe::cuda::detail {
namespace {

constexpr int kMaxK = 32;      // top_k and n_group the kernel holds

// The order of the top-k as one unsigned key: a larger value has a larger key, and -0 the key of
// +0 (they compare equal); ties between equal values go to the lower index in a second reduction.
__device__ __forceinline__ unsigned order_key(float x) {
  if (x == 0.0f) x = 0.0f;
  const unsigned u = __float_as_uint(x);
  return u & 0x80000000u ? ~u : u | 0x80000000u;
}

// The n best of v[lo, hi) into sel[0, n) (absolute indices), best first; the whole warp calls it.
// Lane l holds the keys of candidates lo + l + 32j, j < P, in registers, and offers its best not
// yet taken (the first of the largest key in index order); each round takes the largest key
// offered and, among the lanes offering it, the lowest index, in two warp reductions, and only the
// lane that owned the winner looks at its candidates again. The selection is the same as one scan
// of the whole range per round: (value descending, index ascending).
template <int P>
__device__ __forceinline__ void warp_topk_in(const float* v, int lo, int hi, int n, int* sel) {
  const int lane = threadIdx.x & 31;
  constexpr unsigned kNone = INT_MAX;
  unsigned key[P], left = 0;  // bit j: candidate j not taken
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int i = lo + lane + 32 * j;
    key[j] = i < hi ? order_key(v[i]) : 0u;
    left |= i < hi ? 1u << j : 0u;
  }
  unsigned bk = 0, bi = kNone;  // the lane's offer: key and index
  auto offer = [&] {
    bk = 0, bi = kNone;
#pragma unroll
    for (int j = 0; j < P; ++j)
      if ((left >> j & 1u) && (bi == kNone || key[j] > bk)) bk = key[j], bi = static_cast<unsigned>(lo + lane + 32 * j);
  };
  offer();
  for (int r = 0; r < n; ++r) {
    const unsigned m = __reduce_max_sync(0xffffffffu, bk);
    const unsigned w = __reduce_min_sync(0xffffffffu, bk == m ? bi : kNone);
    if (lane == 0) sel[r] = static_cast<int>(w);
    if (w != kNone && bi == w) {
      left &= ~(1u << ((static_cast<int>(w) - lo) >> 5));
      offer();
    }
  }
  __syncwarp();
}

// Candidates a lane up to 32 (E <= 1024: the callers check). Not inlined: one copy serves every
// call of a kernel.
__device__ __noinline__ void warp_topk(const float* v, int lo, int hi, int n, int* sel) {
  const int per = (hi - lo + 31) >> 5;
  if (per <= 1) warp_topk_in<1>(v, lo, hi, n, sel);
  else if (per <= 2) warp_topk_in<2>(v, lo, hi, n, sel);
  else if (per <= 4) warp_topk_in<4>(v, lo, hi, n, sel);
  else if (per <= 8) warp_topk_in<8>(v, lo, hi, n, sel);
  else if (per <= 16) warp_topk_in<16>(v, lo, hi, n, sel);
  else warp_topk_in<32>(v, lo, hi, n, sel);
}

// sum of x[0, n) in index order (one thread), loads in batches so that only the adds wait
__device__ __forceinline__ float ordered_sum(const float* x, int n) {
  constexpr int kBatch = 16;
  float sum = 0.0f, b[kBatch];
  int e = 0;
  for (; e + kBatch <= n; e += kBatch) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j) b[j] = x[e + j];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) sum += b[j];
  }
  for (; e < n; ++e) sum += x[e];
  return sum;
}

// sum over lanes 0..k-1 of x, in lane order, in every lane
__device__ __forceinline__ float lane_ordered_sum(float x, int k) {
  float sum = 0.0f;
  for (int j = 0; j < k; ++j) sum += __shfl_sync(0xffffffffu, x, j);
  return sum;
}

// Floats of shared memory one routing warp uses.
__host__ __device__ constexpr int route_warp_floats(int experts) { return 2 * experts + 2 * kMaxK; }

// Routes token row z (E logits) into id[0, k) and w[0, k); the whole warp calls it; s is the warp's
// route_warp_floats(E) floats of shared memory.
__device__ void route_token(const routing_args& a, const float* z, std::int32_t* id, float* w, float* s) {
  const int lane = threadIdx.x & 31;
  const int E = a.experts, k = a.k;
  float* choice = s + E;
  int* sel = reinterpret_cast<int*>(choice + E);
  float* gscore = choice + E + kMaxK;
  int mine = 0;   // lane j < k: the j-th expert selected
  float r = 0.0f;  // and its weight
  if (a.method == 0) {  // softmax over E, k largest, optional renormalization
    float m = -INFINITY;
    for (int e = lane; e < E; e += 32) m = fmaxf(m, z[e]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    for (int e = lane; e < E; e += 32) s[e] = expf(z[e] - m);
    __syncwarp();
    float sum = 0.0f;
    if (lane == 0) sum = ordered_sum(s, E);
    sum = __shfl_sync(0xffffffffu, sum, 0);
    for (int e = lane; e < E; e += 32) s[e] /= sum;
    __syncwarp();
    warp_topk(s, 0, E, k, sel);
    mine = lane < k ? sel[lane] : 0;
    r = lane < k ? s[mine] : 0.0f;
    const float ksum = lane_ordered_sum(r, k);
    if (a.renormalize) r /= ksum;
  } else if (a.method == 1) {  // k largest logits, softmax over them
    warp_topk(z, 0, E, k, sel);
    mine = lane < k ? sel[lane] : 0;
    r = lane < k ? expf(z[mine] - z[sel[0]]) : 0.0f;
    r /= lane_ordered_sum(r, k);
  } else {  // sigmoid, correction bias, grouped top-k
    const int G = a.n_group, per = E / G;
    for (int e = lane; e < E; e += 32) {
      s[e] = 1.0f / (1.0f + expf(-z[e]));
      choice[e] = s[e] + (a.bias ? a.bias[e] : 0.0f);
    }
    __syncwarp();
    for (int g = 0; g < G; ++g) {
      warp_topk(choice, g * per, (g + 1) * per, 2, sel);
      if (lane == 0) gscore[g] = choice[sel[0]] + choice[sel[1]];
      __syncwarp();
    }
    warp_topk(gscore, 0, G, a.topk_group, sel);
    // experts of the groups not kept are out of the running (-inf), as on the CPU
    for (int e = lane; e < E; e += 32) {
      const int g = e / per;
      bool kept = false;
      for (int q = 0; q < a.topk_group; ++q) kept |= sel[q] == g;
      if (!kept) choice[e] = -INFINITY;
    }
    __syncwarp();
    warp_topk(choice, 0, E, k, sel);
    mine = lane < k ? sel[lane] : 0;
    r = lane < k ? s[mine] : 0.0f;
    const float ksum = lane_ordered_sum(r, k);
    if (a.renormalize) r /= (ksum + 1e-20f);
  }
  if (lane < k) {  // lane j: the j-th selection
    id[lane] = mine;
    w[lane] = a.scale != 1.0f ? r * a.scale : r;
  }
}

}  // namespace
}  // namespace polymoe::cuda::detail
