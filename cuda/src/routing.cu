// Routing on the device: one warp per token (routing_device.cuh holds the warp's work).
#include "routing_device.cuh"

namespace polymoe::cuda::detail {
namespace {

constexpr int kWarps = 4;  // tokens per block

__global__ void route_kernel(const routing_args a, const float* __restrict__ logits, int tokens,
                             std::int32_t* __restrict__ ids, float* __restrict__ weights) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x >> 5;
  const int t = blockIdx.x * kWarps + warp;
  if (t >= tokens) return;
  const int E = a.experts, k = a.k;
  route_token(a, logits + static_cast<long long>(t) * E, ids + static_cast<long long>(t) * k,
              weights + static_cast<long long>(t) * k, smem + warp * route_warp_floats(E));
}

}  // namespace

cudaError_t launch_route(const routing_args& r, const float* logits, int tokens, std::int32_t* ids, float* weights,
                         cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  if (r.k > kMaxK || r.n_group > kMaxK) return cudaErrorInvalidValue;
  const int blocks = (tokens + kWarps - 1) / kWarps;
  const size_t smem = sizeof(float) * kWarps * (2 * static_cast<size_t>(r.experts) + 2 * kMaxK);
  if (smem > 48 * 1024) return cudaErrorInvalidValue;
  route_kernel<<<blocks, kWarps * 32, smem, stream>>>(r, logits, tokens, ids, weights);
  return cudaGetLastError();
}

}  // namespace polymoe::cuda::detail
