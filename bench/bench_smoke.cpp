// bench_smoke: Google Benchmark on a couple of tiny layers (H=64, I=32, E=8, k=2), run by ctest as a
// smoke test (bench.smoke, --benchmark_min_time=0.01); no thresholds.
#include <benchmark/benchmark.h>

#include <polymoe/polymoe.hpp>

#include "polymoe_bench.hpp"

namespace {

using namespace polymoe;

template <class Q, class K>
void BM_layer(benchmark::State& state) {
  const bench::preset p{"smoke", 64, 32, 8, 2, 8, "bench_smoke"};
  MoeConfig cfg;
  cfg.hidden = p.hidden;
  cfg.intermediate = p.intermediate;
  cfg.num_experts = p.experts;
  cfg.router.top_k = p.top_k;
  MoeWeights w;
  w.experts = ExpertWeights(ExpertShape{p.experts, p.hidden, p.intermediate, true, false});
  w.experts.w13 = bench::random_hidden(w.experts.w13.rows(), w.experts.w13.cols(), 1) * 0.1f;
  w.experts.w2 = bench::random_hidden(w.experts.w2.rows(), w.experts.w2.cols(), 2) * 0.1f;
  MoeLayer<a2a::local, Q, K> layer(cfg, w);
  const auto T = static_cast<index_t>(state.range(0));
  const Matrix x = bench::random_hidden(T, p.hidden, 3);
  const bench::routing_set r = bench::make_routings(T, p.experts, p.top_k, 4);
  std::size_t v = 0;
  for (auto _ : state) {
    Matrix out = layer.forward_routed(x, r.ids[v], r.weights);
    benchmark::DoNotOptimize(out.data());
    v = (v + 1) % r.ids.size();
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(T) * static_cast<double>(state.iterations()),
                                                  benchmark::Counter::kIsRate);
  state.counters["FLOP/s"] = benchmark::Counter(
      bench::flops_per_forward(p, T) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_layer<quant::fp32, kernel::tbb_grouped>)->Arg(1)->Arg(16);
BENCHMARK(BM_layer<quant::bf16, kernel::tiled>)->Arg(1)->Arg(16);

}  // namespace

BENCHMARK_MAIN();
