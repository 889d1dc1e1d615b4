// Runs either MoeLayer::forward_routed or a direct call of the layer's kernel on the same data, with
// callgrind instrumentation switched on around the timed loop only. tests/zero_cost/run.cmake
// compares the two instruction counts: the layer's dispatch, adapter choice and combine must cost
// nothing measurable next to the kernel.   Usage: zero_cost_probe layer|kernel reference|tbb_grouped
#include <cstdio>
#include <cstring>
#include <random>

#include <tbb/global_control.h>
#include <valgrind/callgrind.h>

#include <polymoe/polymoe.hpp>

using namespace polymoe;

namespace {
template <class K>
int probe(bool through_layer) {
  MoeConfig cfg;
  cfg.hidden = 128;
  cfg.intermediate = 64;
  cfg.num_experts = 8;
  cfg.router.top_k = 2;
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 0.1f);
  MoeWeights w;
  w.experts = ExpertWeights(ExpertShape{8, 128, 64, true, false});
  for (index_t i = 0; i < w.experts.w13.size(); ++i) w.experts.w13.data()[i] = n(rng);
  for (index_t i = 0; i < w.experts.w2.size(); ++i) w.experts.w2.data()[i] = n(rng);
  const index_t T = 16;
  Matrix hidden(T, 128);
  for (index_t i = 0; i < hidden.size(); ++i) hidden.data()[i] = n(rng);
  IdMatrix ids(T, 2);
  Matrix weights(T, 2);
  for (index_t t = 0; t < T; ++t) {
    ids(t, 0) = static_cast<std::int32_t>(t % 8);
    ids(t, 1) = static_cast<std::int32_t>((t + 3) % 8);
    weights(t, 0) = 0.7f;
    weights(t, 1) = 0.3f;
  }
  MoeLayer<a2a::local, quant::fp32, K> layer(cfg, w);
  Matrix out(T, 128);
  const DispatchOutput<format::standard> d{hidden, ids, weights, cfg.num_experts};
  auto once = [&] {
    if (through_layer)
      out = layer.forward_routed(hidden, ids, weights);
    else
      layer.kernel().template run<quant::fp32>(d, layer.prepared(), layer.mlp(), CombineInput<format::standard>{out});
  };
  once();  // warm-up outside the measurement
  CALLGRIND_START_INSTRUMENTATION;
  for (int i = 0; i < 4; ++i) once();
  CALLGRIND_STOP_INSTRUMENTATION;
  std::printf("checksum %.6f\n", static_cast<double>(out.sum()));
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: zero_cost_probe layer|kernel reference|tbb_grouped\n");
    return 2;
  }
  tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
  const bool layer = std::strcmp(argv[1], "layer") == 0;
  if (std::strcmp(argv[2], "reference") == 0) return probe<kernel::reference>(layer);
  if (std::strcmp(argv[2], "tbb_grouped") == 0) return probe<kernel::tbb_grouped>(layer);
  std::fprintf(stderr, "unknown kernel %s\n", argv[2]);
  return 2;
}
