// polymoe_bench's GPU part (built where the CUDA component is): kernel::cuda's layer of the CUDA
// table, local / bf16 / cuda, timed as CUDA graph replays with CUDA events, and the device's own
// limits measured in the same run: the copy bandwidth (read + write of a 1 GiB device-to-device
// copy) and, with cuBLAS, the bf16 matrix rate (8192³, fp32 accumulation).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#ifdef POLYMOE_BENCH_CUBLAS
#include <cublas_v2.h>
#endif

#include <polymoe/cuda_table.hpp>

#include "polymoe_bench.hpp"
#include "polymoe_bench_cuda.hpp"

namespace polymoe::bench {
namespace {

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw error(detail::concat("polymoe_bench: ", what, ": ", cudaGetErrorName(e)));
}

/// Milliseconds of each of `reps` runs of body(i), CUDA events around each.
template <class F>
std::vector<double> event_times(cudaStream_t s, int reps, F&& body) {
  cudaEvent_t a, b;
  ck(cudaEventCreate(&a), "cudaEventCreate");
  ck(cudaEventCreate(&b), "cudaEventCreate");
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    ck(cudaEventRecord(a, s), "cudaEventRecord");
    body(r);
    ck(cudaEventRecord(b, s), "cudaEventRecord");
    ck(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    ck(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

std::string gpu_unavailable() { return cuda::unavailable_reason(); }

gpu_limits measure_gpu_limits() {
  gpu_limits l;
  l.device = cuda::device_name(cuda::current_device());
  cudaStream_t s;
  ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  {
    const std::size_t n = std::size_t{1} << 30;
    cuda::device_memory src(n), dst(n);
    ck(cudaMemsetAsync(src.get(), 1, n, s), "cudaMemsetAsync");
    const double ms = median_of(event_times(s, 7, [&](int) {
      ck(cudaMemcpyAsync(dst.get(), src.get(), n, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
    }));
    l.copy_gbs = 2.0 * static_cast<double>(n) / (ms * 1e-3) / 1e9;
  }
#ifdef POLYMOE_BENCH_CUBLAS
  {
    const int n = 8192;
    cuda::device_array<std::uint16_t> a(std::size_t(n) * n), b(a.size()), c(a.size());
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
      (void)event_times(s, 3, mm);
      const double ms = median_of(event_times(s, 9, mm));
      l.matmul_gflops = 2.0 * n * static_cast<double>(n) * n / (ms * 1e-3) / 1e9;
      cublasDestroy(h);
    }
  }
#endif
  ck(cudaStreamDestroy(s), "cudaStreamDestroy");
  return l;
}

std::vector<record> bench_cuda(const preset& p, const options& o, const std::function<void(std::string)>& info) {
  using Layer = CudaMoeLayer<a2a::local, quant::bf16, kernel::cuda>;
  const auto t_prep = clock_type::now();
  const MoeConfig cfg = config_of(p);
  MoeWeights w;
  w.experts = random_weights(p);
  Layer layer(cfg, w);
  info(detail::concat("[local, bf16, cuda] ", p.name, ": uploaded in ", seconds_since(t_prep), " s; runs ",
                      layer.describe()));
  const int dev = cuda::current_device();
  cudaStream_t s;
  ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  std::vector<record> out;
  for (const index_t T : o.tokens) {
    const Matrix hidden = random_hidden(T, p.hidden, static_cast<std::uint64_t>(T), o.bf16_inputs);
    const routing_set r = make_routings(T, p.experts, p.top_k, static_cast<std::uint64_t>(T) + 17);
    const auto V = r.ids.size();
    const auto n = static_cast<std::size_t>(std::max<index_t>(1, T * p.top_k));
    cuda::device_array<float> dx(static_cast<std::size_t>(std::max<index_t>(1, T * p.hidden))), dw(n),
        dout(static_cast<std::size_t>(std::max<index_t>(1, T * p.hidden)));
    std::vector<cuda::device_array<std::int32_t>> ids;
    dx.upload({hidden.data(), static_cast<std::size_t>(hidden.size())});
    dw.upload({r.weights.data(), static_cast<std::size_t>(r.weights.size())});
    for (const IdMatrix& id : r.ids) {
      ids.emplace_back(n);
      ids.back().upload({id.data(), static_cast<std::size_t>(id.size())});
    }
    const auto forward = [&](std::size_t v) {
      layer.forward_routed(device_view::of(dx.data(), T, p.hidden, dev), device_view::of(ids[v].data(), T, p.top_k, dev),
                           device_view::of(dw.data(), T, p.top_k, dev), device_view::of(dout.data(), T, p.hidden, dev), s);
    };
    // One graph per routing: a forward is replayed as an engine would run it. The first call at
    // this size grows the workspace, outside the capture.
    forward(0);
    ck(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    std::vector<cudaGraphExec_t> graphs(V);
    for (std::size_t v = 0; v < V; ++v) {
      cudaGraph_t g;
      ck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
      forward(v);
      ck(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
      ck(cudaGraphInstantiate(&graphs[v], g, 0), "cudaGraphInstantiate");
      cudaGraphDestroy(g);
    }
    for (std::size_t v = 0; v < V; ++v) ck(cudaGraphLaunch(graphs[v], s), "cudaGraphLaunch");  // warm
    record rec;
    rec.a2a = "local";
    rec.quant = "bf16";
    rec.kernel = "cuda";
    rec.preset = p.name;
    rec.tokens = T;
    rec.experts = p.experts;
    rec.threads = 1;
    rec.flops = flops_per_forward(p, T);
    rec.weight_bytes = r.distinct * expert_bytes("bf16", p);
    rec.note = detail::concat(layer.describe(), "; CUDA graph replays, ", V, " routing(s) cycled");
    std::vector<double> ms = event_times(s, o.reps, [&](int i) {
      ck(cudaGraphLaunch(graphs[static_cast<std::size_t>(i) % V], s), "cudaGraphLaunch");
    });
    for (auto& t : ms) t *= 1e-3;
    summarize(std::move(ms), rec);
    for (auto g : graphs) cudaGraphExecDestroy(g);
    out.push_back(std::move(rec));
  }
  ck(cudaStreamDestroy(s), "cudaStreamDestroy");
  return out;
}

}  // namespace polymoe::bench
