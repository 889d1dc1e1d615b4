// The README's main job (until the polymoe tool lands): build a layer for every valid triple on a
// built-in configuration, run it, check it against the reference kernel, and print a summary with
// timings.  Usage: moe_example [tokens] [repetitions]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <boost/mp11/algorithm.hpp>
#include <polymoe/polymoe.hpp>

using namespace polymoe;

namespace {
Matrix randn(std::mt19937& rng, index_t r, index_t c, float scale) {
  std::normal_distribution<float> n(0.0f, scale);
  Matrix m(r, c);
  for (index_t i = 0; i < m.size(); ++i) m.data()[i] = n(rng);
  return m;
}
}  // namespace

int main(int argc, char** argv) try {
  const index_t T = argc > 1 ? std::atol(argv[1]) : 128;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;

  // A Qwen3-MoE-like layer scaled down to run in a second: softmax top-4 of 32, renormalized.
  MoeConfig cfg;
  cfg.hidden = 512;
  cfg.intermediate = 256;
  cfg.num_experts = 32;
  cfg.router.top_k = 4;
  cfg.router.renormalize = true;
  std::mt19937 rng(42);
  MoeWeights w;
  w.experts = ExpertWeights(ExpertShape{cfg.num_experts, cfg.hidden, cfg.intermediate, true, false});
  w.experts.w13 = randn(rng, w.experts.w13.rows(), w.experts.w13.cols(), 0.044f);
  w.experts.w2 = randn(rng, w.experts.w2.rows(), w.experts.w2.cols(), 0.0625f);
  w.router_weight = randn(rng, cfg.num_experts, cfg.hidden, 0.05f);
  const Matrix hidden = randn(rng, T, cfg.hidden, 1.0f);

  std::printf("polymoe example: H=%ld I=%ld E=%ld top_k=%ld tokens=%ld, %d repetitions\n",
              static_cast<long>(cfg.hidden), static_cast<long>(cfg.intermediate), static_cast<long>(cfg.num_experts),
              static_cast<long>(cfg.top_k()), static_cast<long>(T), reps);
  const double flops = 2.0 * static_cast<double>(T * cfg.top_k()) * 3.0 * static_cast<double>(cfg.hidden * cfg.intermediate);

  MoeLayer<a2a::local, quant::fp32, kernel::reference> oracle(cfg, w);
  const Matrix want = oracle.forward(hidden);
  std::printf("%-40s %12s %10s %14s\n", "a2a/quant/kernel", "median ms", "GFLOP/s", "rel err vs ref");
  int failures = 0;
  boost::mp11::mp_for_each<valid_triples>([&]<class A, class Q, class K>(boost::mp11::mp_list<A, Q, K>) {
    MoeLayer<A, Q, K> layer(cfg, w);
    Matrix out = layer.forward(hidden);  // warm-up
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      out = layer.forward(hidden);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    const double err = (out - want).cwiseAbs().maxCoeff() / want.cwiseAbs().maxCoeff();
    // Against the fp32 oracle: fp32 agrees to rounding, bf16 to ~1e-2; the 8- and 4-bit schemes
    // differ by their own quantization error (up to ~0.3, docs/quantization.md), so for them the
    // check only catches a broken layer (errors of order 1).
    const double tol = Q::name == std::string_view("fp32") ? 1e-5 : Q::name == std::string_view("bf16") ? 2e-2 : 0.5;
    failures += err > tol;
    std::printf("%-40s %12.3f %10.2f %14.2e%s\n",
                (std::string(A::name) + "/" + std::string(Q::name) + "/" + std::string(K::name)).c_str(), med,
                flops / (med * 1e6), err, err > tol ? "  FAIL" : "");
  });
  std::printf("%s\n", failures ? "some layers disagree with the reference" : "all layers agree with the reference");
  return failures ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
