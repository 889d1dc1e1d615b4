// polymoe_bench's GPU part (built where the CUDA component is): kernel::cuda's layers of the CUDA
// table, local / Q / cuda for the schemes of its row, timed as CUDA graph replays with CUDA events, and the device's own
// limits measured in the same run (gpu_limits.hpp).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include <polymoe/cuda_table.hpp>

#include "gpu_limits.hpp"
#include "polymoe_bench.hpp"
#include "polymoe_bench_cuda.hpp"

namespace polymoe::bench {
namespace {

using cuda::bench::check;

}  // namespace

std::string gpu_unavailable() { return cuda::unavailable_reason(); }

gpu_limits measure_gpu_limits() {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  const auto l = cuda::bench::measure_device_limits(s);
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
  return {cuda::device_name(cuda::current_device()), l.copy_gbs, l.matmul_gflops};
}

namespace {

template <class Q>
std::vector<record> bench_cuda_scheme(const preset& p, const ExpertWeights& fp32, const options& o,
                                      const std::function<void(std::string)>& info) {
  using Layer = CudaMoeLayer<a2a::local, Q, kernel::cuda>;
  const auto t_prep = clock_type::now();
  const MoeConfig cfg = config_of(p);
  MoeWeights w;
  w.experts = fp32;
  Layer layer(cfg, w);
  info(detail::concat("[local, ", Q::name, ", cuda] ", p.name, ": quantized and uploaded in ", seconds_since(t_prep),
                      " s; runs ", layer.describe()));
  const int dev = cuda::current_device();
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
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
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    std::vector<cudaGraphExec_t> graphs(V);
    for (std::size_t v = 0; v < V; ++v) {
      cudaGraph_t g;
      check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
      forward(v);
      check(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
      check(cudaGraphInstantiate(&graphs[v], g, 0), "cudaGraphInstantiate");
      cudaGraphDestroy(g);
    }
    for (std::size_t v = 0; v < V; ++v) check(cudaGraphLaunch(graphs[v], s), "cudaGraphLaunch");  // warm
    record rec;
    rec.a2a = "local";
    rec.quant = Q::name;
    rec.kernel = "cuda";
    rec.preset = p.name;
    rec.tokens = T;
    rec.experts = p.experts;
    rec.threads = 1;
    rec.flops = flops_per_forward(p, T);
    rec.weight_bytes = r.distinct * expert_bytes(Q::name, p);
    rec.note = detail::concat(layer.describe(), "; CUDA graph replays, ", V, " routing(s) cycled");
    std::vector<double> ms = cuda::bench::event_ms(s, o.reps, [&](int i) {
      check(cudaGraphLaunch(graphs[static_cast<std::size_t>(i) % V], s), "cudaGraphLaunch");
    });
    for (auto& t : ms) t *= 1e-3;
    summarize(std::move(ms), rec);
    for (auto g : graphs) cudaGraphExecDestroy(g);
    out.push_back(std::move(rec));
  }
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
  return out;
}

}  // namespace

std::vector<record> bench_cuda(const preset& p, const ExpertWeights& fp32, const options& o,
                               const std::function<void(std::string)>& info, std::string_view quant) {
  std::vector<record> out;
  boost::mp11::mp_for_each<boost::mp11::mp_transform<boost::mp11::mp_identity,
                                                     pairing::kernel_schemes<cuda_table, kernel::cuda>>>([&](auto id) {
    using Q = typename decltype(id)::type;
    if (Q::name == quant) out = bench_cuda_scheme<Q>(p, fp32, o, info);
  });
  require(!out.empty() || o.tokens.empty(), "polymoe_bench: kernel::cuda does not run ", quant);
  return out;
}

}  // namespace polymoe::bench
