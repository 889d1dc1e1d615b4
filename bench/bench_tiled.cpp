// bench_tiled: kernel::tiled on the Qwen3-30B-A3B MoE layer (H=2048, I=768, E=128, k=8) against
// this machine's own limits, all measured in the same run:
//   (a) DRAM read bandwidth: a multi-threaded streaming read over max(1 GiB, 4 x LLC);
//   (b) fp32 FMA peak: register-resident FMAs on every thread;
//   (c) decode T=1: bytes of the experts used / time, cycling the routing over all experts so the
//       weights touched exceed 2 x LLC and come from DRAM; ratio to (a);
//   (d) prefill T tokens: 2·T·k·3·H·I flops / time; ratio to (b).
//
// --tuning KEY=VALUE,... builds the layer's kernel with that tuning (kernels/tiled/tuning.hpp;
// polymoe run --help lists the keys), e.g. huge-pages=off.
//
//   bench_tiled [--threads N] [--quant bf16|fp32|both] [--tokens 1,16,64,512,2048] [--seconds S]
//               [--tuning KEY=VALUE,...]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include <polymoe/polymoe.hpp>

#include "cli11_support.hpp"
#include "limits.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

using namespace polymoe;
using bench::clock_type;
using bench::Limits;
using bench::llc_bytes;
using bench::seconds_since;

namespace {

constexpr index_t H = 2048, I = 768, E = 128, K = 8;

// Fast random weights (xorshift), in parallel: normal-ish scale 1/sqrt(fan-in) is enough here.
template <class Out>
void fill_random(Out* dst, std::size_t n, float scale, std::uint64_t seed, auto convert) {
  const std::size_t chunk = std::size_t{1} << 20;
  tbb::parallel_for(std::size_t{0}, (n + chunk - 1) / chunk, [&](std::size_t c) {
    std::uint64_t x = seed ^ (0x9E3779B97F4A7C15ull * (c + 1));
    const std::size_t end = std::min(n, (c + 1) * chunk);
    for (std::size_t i = c * chunk; i < end; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      const float u = static_cast<float>(x >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
      dst[i] = convert(u * scale);
    }
  });
}

template <class Q>
typename Q::weights make_weights(std::uint64_t seed);

template <>
quant::bf16::weights make_weights<quant::bf16>(std::uint64_t seed) {
  quant::bf16::weights w{quant::ExpertStore{ExpertShape{E, H, I, true, false}, {}, {}}, {}, {}};
  w.w13.resize(static_cast<std::size_t>(E * 2 * I * H));
  w.w2.resize(static_cast<std::size_t>(E * H * I));
  const auto to_bf16 = [](float v) { return codecs::float_to_bf16(v); };
  fill_random(w.w13.data(), w.w13.size(), 1.7f / std::sqrt(float(H)), seed, to_bf16);
  fill_random(w.w2.data(), w.w2.size(), 1.7f / std::sqrt(float(I)), seed + 1, to_bf16);
  return w;
}
template <>
quant::fp32::weights make_weights<quant::fp32>(std::uint64_t seed) {
  quant::fp32::weights w{quant::ExpertStore{ExpertShape{E, H, I, true, false}, {}, {}}, Matrix(E * 2 * I, H),
                         Matrix(E * H, I)};
  const auto id = [](float v) { return v; };
  fill_random(w.w13.data(), static_cast<std::size_t>(w.w13.size()), 1.7f / std::sqrt(float(H)), seed, id);
  fill_random(w.w2.data(), static_cast<std::size_t>(w.w2.size()), 1.7f / std::sqrt(float(I)), seed + 1, id);
  return w;
}

MoeConfig qwen3_config() {
  MoeConfig cfg;
  cfg.hidden = H;
  cfg.intermediate = I;
  cfg.num_experts = E;
  cfg.router.top_k = K;
  cfg.activation = Activation::silu_gated;
  return cfg;
}

struct Options {
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  std::vector<std::string> quants = {"bf16", "fp32"};
  std::vector<index_t> tokens = {1, 16, 64, 512, 2048};
  double seconds = 1.5;  // time per measurement (at least 3 runs)
  kernels::tiled::tuning tuning;  // --tuning
};

template <class Q>
void bench_scheme(const Options& o, Limits& limits, std::size_t llc) {
  using Layer = MoeLayer<a2a::local, Q, kernel::tiled>;
  const auto t_prep = clock_type::now();
  BasicMoeWeights<typename Q::weights> w;
  w.experts = make_weights<Q>(42);
  Layer layer(qwen3_config(), std::move(w), {}, kernel::tiled{o.tuning});
  const auto& packed = layer.prepared().packed;
  std::printf("\n[%s] layer prepared in %.1f s: %.2f GB of packed expert weights\n", std::string(Q::name).c_str(),
              seconds_since(t_prep), static_cast<double>(packed.expert_bytes()) * E / 1e9);
  std::printf("%8s %12s %12s %14s %10s\n", "tokens", "ms/forward", "GFLOP/s", "weight GB/s", "ratio");

  std::uint64_t rng = 12345;
  const auto next = [&] { return rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; };
  for (const index_t T : o.tokens) {
    Matrix hidden(T, H);
    for (index_t i = 0; i < hidden.size(); ++i)
      hidden.data()[i] = static_cast<float>(static_cast<double>(next() >> 11) / 9007199254740992.0 * 2 - 1);
    // Routings to cycle through. Decode-sized batches walk all experts in turn, so consecutive
    // forwards touch disjoint experts and the layer (> 2 x LLC) streams from DRAM.
    const bool decode = T * K < E;
    const index_t variants = decode ? E : 4;
    std::vector<IdMatrix> ids(static_cast<std::size_t>(variants), IdMatrix(T, K));
    Matrix weights = Matrix::Constant(T, K, 1.0f / K);
    index_t cursor = 0;
    for (auto& id : ids)
      for (index_t t = 0; t < T; ++t) {
        std::vector<int> perm(E);
        for (int e = 0; e < E; ++e) perm[static_cast<std::size_t>(e)] = e;
        for (index_t j = 0; j < K; ++j) {
          if (decode) {
            id(t, j) = static_cast<std::int32_t>(cursor++ % E);
          } else {
            const auto pick = static_cast<std::size_t>(j) + next() % static_cast<std::size_t>(E - j);
            std::swap(perm[static_cast<std::size_t>(j)], perm[pick]);
            id(t, j) = perm[static_cast<std::size_t>(j)];
          }
        }
      }
    std::size_t v = 0;
    for (index_t i = 0; i < std::min<index_t>(variants, 16); ++i, v = (v + 1) % ids.size())  // warm-up
      layer.forward_routed(hidden, ids[v], weights);
    int runs = 0;
    const auto t0 = clock_type::now();
    while (runs < 3 || seconds_since(t0) < o.seconds) {
      layer.forward_routed(hidden, ids[v], weights);
      v = (v + 1) % ids.size();
      ++runs;
    }
    const double t = seconds_since(t0) / runs;
    const double flops = 2.0 * static_cast<double>(T) * K * 3 * H * I;
    // Bytes of the experts used: distinct experts of this forward times one expert's weights.
    std::vector<char> used(E, 0);
    for (index_t tt = 0; tt < T; ++tt)
      for (index_t j = 0; j < K; ++j) used[static_cast<std::size_t>(ids[0](tt, j))] = 1;
    const double bytes = static_cast<double>(std::count(used.begin(), used.end(), 1)) *
                         static_cast<double>(packed.expert_bytes());
    const double gbs = bytes / t / 1e9;
    if (T == 1) {
      const double dram_gbs = limits.dram();
      std::printf("%8ld %12.3f %12.1f %14.1f %9.0f%%  of DRAM read (routing cycles over %.0f MB of weights, LLC %.0f MB)\n",
                  static_cast<long>(T), t * 1e3, flops / t / 1e9, gbs, 100 * gbs / dram_gbs,
                  static_cast<double>(E) * static_cast<double>(packed.expert_bytes()) / 1e6,
                  static_cast<double>(llc) / 1e6);
    } else {
      std::printf("%8ld %12.3f %12.1f %14.1f %9.0f%%  of FMA peak\n", static_cast<long>(T), t * 1e3, flops / t / 1e9,
                  gbs, 100 * flops / t / 1e9 / limits.peak());
    }
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string quant = "both", tuning_text;
  CLI::App app("bench_tiled: kernel::tiled on the Qwen3-30B-A3B MoE layer against this machine's limits",
               "bench_tiled");
  programs::set_up(app, POLYMOE_VERSION_STRING, POLYMOE_GIT_COMMIT);
  app.add_option("--threads", o.threads, "oneTBB threads (default: all)")->type_name("N")->check(CLI::Range(1, 1 << 16));
  app.add_option("--quant", quant, "the schemes timed (default both)")
      ->type_name("NAME")
      ->check(programs::choice({"bf16", "fp32", "both"}));
  app.add_option("--tokens", o.tokens, "token counts (default 1,16,64,512,2048)")
      ->delimiter(',')
      ->type_name("LIST")
      ->check(CLI::Range(index_t{1}, index_t{1} << 30));
  app.add_option("--seconds", o.seconds, "time per measurement, at least 3 runs (default 1.5)")
      ->type_name("S")
      ->check(CLI::PositiveNumber);
  app.add_option("--tuning", tuning_text, "the kernel's tuning (polymoe run --help lists the keys)")
      ->type_name("KEY=VALUE,...");
  if (const auto status = programs::parse(app, argc, argv, 2)) return *status;
  if (quant != "both") o.quants = {quant};
  try {
    o.tuning = kernels::tiled::parse_tuning(tuning_text);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tiled: %s\n", e.what());
    return 2;
  }
  tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(o.threads));
  const std::size_t llc = llc_bytes();
  std::printf("bench_tiled: Qwen3-30B-A3B MoE layer H=%ld I=%ld E=%ld k=%ld, silu-gated; %d threads; LLC %.0f MB%s\n",
              static_cast<long>(H), static_cast<long>(I), static_cast<long>(E), static_cast<long>(K), o.threads,
              static_cast<double>(llc) / 1e6,
              o.tuning == kernels::tiled::tuning{} ? "" : ("; tuning " + kernels::tiled::to_string(o.tuning)).c_str());
  Limits limits{o.threads, std::max<std::size_t>(std::size_t{1} << 30, 4 * llc)};
  std::printf("(a) DRAM read bandwidth: %.1f GB/s\n(b) fp32 FMA peak: %.1f GFLOP/s\n", limits.dram(), limits.peak());
  for (const auto& q : o.quants) {
    if (q == "bf16")
      bench_scheme<quant::bf16>(o, limits, llc);
    else if (q == "fp32")
      bench_scheme<quant::fp32>(o, limits, llc);
  }
  std::printf("\nlimits, best of all passes: (a) DRAM read %.1f GB/s, (b) fp32 FMA peak %.1f GFLOP/s\n",
              limits.dram_gbs, limits.peak_gflops);
  return 0;
}
