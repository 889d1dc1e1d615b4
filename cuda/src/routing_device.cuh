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

struct best {
  float v;
  int i;
};
// a ranks before b: larger value, ties to the lower index (indices are distinct)
__device__ __forceinline__ bool before(best a, best b) { return a.v > b.v || (a.v == b.v && a.i < b.i); }

__device__ __forceinline__ best warp_best(best b) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    best o{__shfl_xor_sync(0xffffffffu, b.v, off), __shfl_xor_sync(0xffffffffu, b.i, off)};
    if (before(o, b)) b = o;
  }
  return b;
}

// The n best of v[lo, hi) into sel[0, n) (absolute indices), best first; the whole warp calls it.
// Lane l holds the candidates lo + l + 32j; its best not yet taken (bit j of `taken`) enters a
// warp reduction each round, and only the lane that owned the winner scans its candidates again.
// Each lane's best is the one the scan of all its untaken candidates in index order gives, so the
// selection is the same as one scan of the whole range per round.
__device__ void warp_topk(const float* v, int lo, int hi, int n, int* sel) {
  const int lane = threadIdx.x & 31;
  const int per = (hi - lo + 31) >> 5;  // candidates a lane, at most 32 (E <= 1024: the callers check)
  unsigned taken = 0;
  auto local_best = [&] {
    best b{-INFINITY, INT_MAX};
    for (int j = 0; j < per; ++j) {
      const int i = lo + lane + 32 * j;
      if (i >= hi || (taken >> j & 1u)) continue;
      const best c{v[i], i};
      if (b.i == INT_MAX || before(c, b)) b = c;
    }
    return b;
  };
  best mine = local_best();
  for (int r = 0; r < n; ++r) {
    const best b = warp_best(mine);
    if (lane == 0) sel[r] = b.i;
    if (b.i != INT_MAX && ((b.i - lo) & 31) == lane) {
      taken |= 1u << ((b.i - lo) >> 5);
      mine = local_best();
    }
  }
  __syncwarp();
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
  if (a.method == 0) {  // softmax over E, k largest, optional renormalization
    float m = -INFINITY;
    for (int e = lane; e < E; e += 32) m = fmaxf(m, z[e]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    for (int e = lane; e < E; e += 32) s[e] = expf(z[e] - m);
    __syncwarp();
    float sum = 0.0f;
    if (lane == 0)
      for (int e = 0; e < E; ++e) sum += s[e];
    sum = __shfl_sync(0xffffffffu, sum, 0);
    for (int e = lane; e < E; e += 32) s[e] /= sum;
    __syncwarp();
    warp_topk(s, 0, E, k, sel);
    if (lane == 0) {
      float ksum = 0.0f;
      for (int j = 0; j < k; ++j) ksum += (w[j] = s[sel[j]]);
      for (int j = 0; j < k; ++j) {
        id[j] = sel[j];
        if (a.renormalize) w[j] /= ksum;
      }
    }
  } else if (a.method == 1) {  // k largest logits, softmax over them
    warp_topk(z, 0, E, k, sel);
    if (lane == 0) {
      const float m = z[sel[0]];
      float sum = 0.0f;
      for (int j = 0; j < k; ++j) sum += (w[j] = expf(z[sel[j]] - m));
      for (int j = 0; j < k; ++j) {
        w[j] /= sum;
        id[j] = sel[j];
      }
    }
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
    if (lane == 0) {
      float ksum = 0.0f;
      for (int j = 0; j < k; ++j) ksum += (w[j] = s[sel[j]]);
      for (int j = 0; j < k; ++j) {
        id[j] = sel[j];
        if (a.renormalize) w[j] /= (ksum + 1e-20f);
      }
    }
  }
  if (lane == 0 && a.scale != 1.0f)
    for (int j = 0; j < k; ++j) w[j] *= a.scale;
}

}  // namespace
}  // namespace polymoe::cuda::detail
