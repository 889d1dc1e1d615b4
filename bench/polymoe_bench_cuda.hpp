#pragma once
// What polymoe_bench's main program calls of its GPU part (polymoe_bench_cuda.cpp, built where the
// CUDA component is; POLYMOE_BENCH_CUDA says so).
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "polymoe_bench.hpp"

namespace polymoe::bench {

/// The device's limits, measured in the run: copy bandwidth (read + write) and the cuBLAS bf16
/// matrix rate (0 without cuBLAS).
struct gpu_limits {
  std::string device;
  double copy_gbs = 0, matmul_gflops = 0;
};

/// Why kernel::cuda cannot run here (no device, no code for it), or empty.
std::string gpu_unavailable();
gpu_limits measure_gpu_limits();
/// local / `quant` / cuda (a scheme of kernel::cuda's row) on the preset's weights `fp32`, quantized,
/// at each T: CUDA graph replays, the routings cycled as the CPU layers' (decode walks every
/// expert), one record per T.
std::vector<record> bench_cuda(const preset& p, const ExpertWeights& fp32, const options& o,
                               const std::function<void(std::string)>& info, std::string_view quant);

}  // namespace polymoe::bench
