#pragma once
// The GPU's own limits, measured where its kernels are timed (polymoe_cuda_bench, polymoe_bench):
// the copy bandwidth (read + write of a 1 GiB device-to-device copy) and, built with cuBLAS
// (POLYMOE_BENCH_CUBLAS), the bf16 matrix rate (8192³, fp32 accumulation, random data). Each is the
// median of its timings, CUDA events around each.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>
#ifdef POLYMOE_BENCH_CUBLAS
#include <cublas_v2.h>
#endif

#include <polymoe/codecs/bf16.hpp>
#include <polymoe/core/error.hpp>
#include <polymoe/cuda/experts.hpp>

namespace polymoe::cuda::bench {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw error(polymoe::detail::concat("bench: ", what, ": ", cudaGetErrorName(e)));
}

/// Milliseconds of each of `reps` runs of body(i) on stream s.
template <class F>
std::vector<double> event_ms(cudaStream_t s, int reps, F&& body) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    check(cudaEventRecord(a, s), "cudaEventRecord");
    body(r);
    check(cudaEventRecord(b, s), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct device_limits {
  double copy_gbs = 0;       ///< read + write
  double matmul_gflops = 0;  ///< cuBLAS bf16; 0 without cuBLAS
};

inline device_limits measure_device_limits(cudaStream_t s) {
  device_limits l;
  {
    const std::size_t n = std::size_t{1} << 30;
    device_memory src(n), dst(n);
    check(cudaMemsetAsync(src.get(), 1, n, s), "cudaMemsetAsync");
    const double ms = median(event_ms(s, 7, [&](int) {
      check(cudaMemcpyAsync(dst.get(), src.get(), n, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
    }));
    l.copy_gbs = 2.0 * static_cast<double>(n) / (ms * 1e-3) / 1e9;
  }
#ifdef POLYMOE_BENCH_CUBLAS
  const int n = 8192;
  device_array<std::uint16_t> a(std::size_t(n) * n), b(a.size()), c(a.size());
  std::vector<std::uint16_t> host(a.size());
  std::uint32_t x = 7;
  for (auto& v : host) v = codecs::float_to_bf16(((x = x * 1664525u + 1013904223u) >> 8) * (1.0f / 16777216.0f) - 0.5f);
  a.upload(host);
  b.upload(host);
  cublasHandle_t h;
  if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
    cublasSetStream(h, s);
    const float one = 1.0f, zero = 0.0f;
    const auto mm = [&](int) {
      cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.data(), CUDA_R_16BF, n, b.data(), CUDA_R_16BF, n,
                   &zero, c.data(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    };
    (void)event_ms(s, 3, mm);
    l.matmul_gflops = 2.0 * n * static_cast<double>(n) * n / (median(event_ms(s, 9, mm)) * 1e-3) / 1e9;
    cublasDestroy(h);
  }
#endif
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  return l;
}

}  // namespace polymoe::cuda::bench
