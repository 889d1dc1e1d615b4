// Times cuda::Experts::forward (device routing included) on one layer shape at several batch
// sizes, for each scheme of kernel::cuda's row (bf16; MXFP4 and NVFP4 weights kept 4-bit on the
// device; E4M3 weights and activations), eager and as CUDA graph replays, with CUDA events; the weights the routing touches are
// rotated over several routings so that decode reads them from HBM, not from L2. Prints µs per
// forward, the bandwidth over the distinct experts' weights, and TFLOP/s; and the device's
// copy bandwidth measured in the same run.
//   polymoe_cuda_bench [--hidden 2048] [--inter 768] [--experts 128] [--top-k 8] [--tokens 1,64,4096]
//                      [--iters N] [--quant LIST (default: every scheme of kernel::cuda's row)]
//                      [--tiles LIST (default tiny,deep,small,large,wide,auto)]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_runtime_api.h>
#ifdef POLYMOE_BENCH_CUBLAS
#include <cublas_v2.h>
#endif

#include <polymoe/codecs/e4m3.hpp>
#include <polymoe/cuda_table.hpp>

#include "gpu_limits.hpp"

#include "cli11_support.hpp"

namespace {

using namespace polymoe;

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "polymoe_cuda_bench: %s: %s\n", what, cudaGetErrorName(e));
    std::exit(1);
  }
}

// median of `reps` timings of `body` (ms each), body run `inner` times per timing
template <class F>
double time_ms(cudaStream_t s, int reps, int inner, F&& body) {
  return cuda::bench::median(cuda::bench::event_ms(s, reps, [&](int) {
           for (int i = 0; i < inner; ++i) body(i);
         })) /
         inner;
}

}  // namespace

int main(int argc, char** argv) try {
  index_t H = 2048, I = 768, E = 128, k = 8;
  std::vector<index_t> tokens{1, 64, 4096};
  int iters = 20;
  // the schemes of kernel::cuda's row, in the table's order
  using cuda_schemes =
      boost::mp11::mp_transform<boost::mp11::mp_identity, pairing::kernel_schemes<cuda_table, kernel::cuda>>;
  std::vector<std::string> row;
  boost::mp11::mp_for_each<cuda_schemes>([&](auto id) { row.emplace_back(decltype(id)::type::name); });
  std::vector<std::string> quants = row;
  CLI::App app("polymoe_cuda_bench: cuda::Experts::forward on one layer shape, eager and as CUDA graph replays",
               "polymoe_cuda_bench");
  programs::set_up(app, POLYMOE_VERSION_STRING, POLYMOE_GIT_COMMIT);
  const auto positive = CLI::Range(index_t{1}, index_t{1} << 30);
  app.add_option("--hidden", H, "H (default 2048)")->type_name("N")->check(positive);
  app.add_option("--inter", I, "I (default 768)")->type_name("N")->check(positive);
  app.add_option("--experts", E, "E (default 128)")->type_name("N")->check(positive);
  app.add_option("--top-k", k, "k (default 8)")->type_name("N")->check(positive);
  app.add_option("--tokens", tokens, "token counts (default 1,64,4096)")
      ->delimiter(',')
      ->type_name("LIST")
      ->check(positive);
  std::vector<std::string> tile_names{"tiny", "deep", "small", "large", "wide", "auto"};
  app.add_option("--tiles", tile_names, "tile choices timed (default tiny,deep,small,large,wide,auto; '-' in the table: not timed)")
      ->delimiter(',')
      ->check(CLI::IsMember({"tiny", "deep", "small", "large", "wide", "auto"}));
  app.add_option("--iters", iters, "forwards per timing (default 20)")->type_name("N")->check(CLI::Range(1, 1 << 20));
  app.add_option("--quant", quants, "schemes (default: every scheme of kernel::cuda's row)")
      ->delimiter(',')
      ->type_name("LIST")
      ->check(CLI::IsMember(row));
  if (const auto status = programs::parse(app, argc, argv, 2)) return *status;
  if (const std::string why = cuda::unavailable_reason(); !why.empty()) {
    std::printf("polymoe_cuda_bench: skipped: %s\n", why.c_str());
    return 0;
  }
  int dev = 0;
  cudaDeviceProp prop{};
  ck(cudaGetDevice(&dev), "cudaGetDevice");
  ck(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  std::printf("device: %s, %d SMs, %.0f MB L2\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6);

  cudaStream_t s;
  ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  {
    const auto lim = cuda::bench::measure_device_limits(s);
    std::printf("device copy: %.0f GB/s (read + write)\n", lim.copy_gbs);
    if (lim.matmul_gflops > 0) std::printf("cuBLAS bf16 matmul 8192^3: %.0f TFLOP/s\n", lim.matmul_gflops / 1e3);
  }

  const ExpertShape shape{E, H, I, true, false};
  std::mt19937 rng(1);
  std::uint32_t lcg = 12345;
  auto next = [&] { return (lcg = lcg * 1664525u + 1013904223u) >> 8; };
  // Random weights drawn directly in Q's stored form (values of about 1/sqrt(fan-in)): 16-bit
  // weights from a table of normal values; 4-bit codes uniform, with block scales that make them of
  // that size. Returns the engine and the bytes of one expert's weights.
  auto make_experts = [&](auto id) {
    using W = typename decltype(id)::type::weights;
    W w;
    w.shape_ = shape;
    double bytes = 0;
    auto codes = [&](index_t rows, index_t K, index_t block, std::vector<std::uint8_t>& q,
                     std::vector<std::uint8_t>& sc, auto&& scale_code) {
      q.resize(static_cast<std::size_t>(E * rows * K / 2));
      sc.resize(static_cast<std::size_t>(E * rows * ((K + block - 1) / block)));
      for (auto& v : q) v = static_cast<std::uint8_t>(next());
      for (auto& v : sc) v = static_cast<std::uint8_t>(scale_code());
      bytes += static_cast<double>(q.size() + sc.size()) / static_cast<double>(E);
    };
    if constexpr (requires { w.w13_blocks; }) {  // MXFP4: E8M0 scales 2^-7..2^-5
      codes(2 * I, H, 32, w.w13_blocks, w.w13_scales, [&] { return 120 + next() % 3; });
      codes(H, I, 32, w.w2_blocks, w.w2_scales, [&] { return 120 + next() % 3; });
    } else if constexpr (requires { w.w13_scale_2; }) {  // NVFP4: E4M3 scales 1..7.5, scale_2 2^-8
      codes(2 * I, H, 16, w.w13, w.w13_scale, [&] { return 0x38 + next() % 24; });
      codes(H, I, 16, w.w2, w.w2_scale, [&] { return 0x38 + next() % 24; });
      w.w13_scale_2.assign(static_cast<std::size_t>(E), 1.0f / 256);
      w.w2_scale_2.assign(static_cast<std::size_t>(E), 1.0f / 256);
    } else if constexpr (std::is_same_v<typename decltype(w.w13)::value_type, std::uint8_t>) {
      // E4M3 codes of normal values times 64, scales 1/(64·sqrt(fan-in)): DeepSeek's blocks or one
      // a projection. Bytes: the codes and the scales as the device holds them (one a row's 128 k).
      w.w13.resize(static_cast<std::size_t>(E * 2 * I * H));
      w.w2.resize(static_cast<std::size_t>(E * H * I));
      std::vector<std::uint8_t> table(4096);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (auto& v : table) v = codecs::float_to_e4m3_sat(64.0f * nd(rng));
      for (auto& v : w.w13) v = table[next() % 4096];
      for (auto& v : w.w2) v = table[next() % 4096];
      const float s13 = 1.0f / (64.0f * std::sqrt(static_cast<float>(H))), s2 = 1.0f / (64.0f * std::sqrt(static_cast<float>(I)));
      const index_t gH = (H + 127) / 128, gI = (I + 127) / 128;
      if constexpr (requires { w.w13_scale_inv; }) {
        w.w13_scale_inv.assign(static_cast<std::size_t>(E * 2 * gI * gH), s13);
        w.w2_scale_inv.assign(static_cast<std::size_t>(E * gH * gI), s2);
      } else {
        w.w13_scale.assign(static_cast<std::size_t>(E), s13);
        w.w2_scale.assign(static_cast<std::size_t>(E), s2);
      }
      bytes = static_cast<double>(w.w13.size() + w.w2.size()) / static_cast<double>(E) +
              4.0 * static_cast<double>(gH * 2 * gI * 128 + gI * gH * 128);
    } else {  // 16-bit weights
      w.w13.resize(static_cast<std::size_t>(E * 2 * I * H));
      w.w2.resize(static_cast<std::size_t>(E * H * I));
      std::vector<std::uint16_t> table(4096);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (auto& v : table) v = codecs::float_to_bf16(nd(rng) / std::sqrt(static_cast<float>(H)));
      for (auto& v : w.w13) v = table[next() % 4096];
      for (auto& v : w.w2) v = table[next() % 4096];
      bytes = 2.0 * static_cast<double>(w.w13.size() + w.w2.size()) / static_cast<double>(E);
    }
    return std::pair<cuda::Experts, double>(cuda::Experts(w, ExpertMlp{}), bytes);
  };
  RouterConfig rc;
  rc.top_k = k;
  const cuda::Router router(rc, E);
  boost::mp11::mp_for_each<cuda_schemes>([&](auto id) {
    const std::string f(decltype(id)::type::name);
    if (std::find(quants.begin(), quants.end(), f) == quants.end()) return;
    auto [experts, expert_bytes] = make_experts(id);

    std::printf("layer: H=%lld I=%lld E=%lld k=%lld, %s (%s weights, %.1f MB an expert)\n", (long long)H,
                (long long)I, (long long)E, (long long)k, f.c_str(), experts.weight_format().data(),
                expert_bytes / 1e6);
    std::printf("%8s %9s %9s %9s %9s %9s %9s %9s %9s %8s %12s %8s\n", "T", "route us", "tiny us", "deep us", "small us", "large us",
                "wide us", "auto us", "graph us", "experts", "weight GB/s", "TFLOP/s");
    for (index_t T : tokens) {
      const int sets = T <= 64 ? 8 : 2;  // routings rotated, so that decode reads its experts from HBM
      std::normal_distribution<float> nd(0.0f, 1.0f);
      Matrix x(T, H), logits(T * sets, E);
      for (index_t i = 0; i < x.size(); ++i) x.data()[i] = nd(rng);
      for (index_t i = 0; i < logits.size(); ++i) logits.data()[i] = nd(rng);
      double distinct = 0;
      for (int q = 0; q < sets; ++q) {
        const Routing r = router.route(logits.middleRows(q * T, T));
        std::set<int> used(r.ids.data(), r.ids.data() + r.ids.size());
        distinct += static_cast<double>(used.size()) / sets;
      }
      cuda::device_array<float> dx(static_cast<std::size_t>(x.size())), dz(static_cast<std::size_t>(logits.size())),
          dout(static_cast<std::size_t>(T * H)), dw(static_cast<std::size_t>(T * k));
      cuda::device_array<std::int32_t> di(static_cast<std::size_t>(T * k));
      dx.upload({x.data(), static_cast<std::size_t>(x.size())});
      dz.upload({logits.data(), static_cast<std::size_t>(logits.size())});
      auto fwd = [&](int i) { experts.forward(dx.data(), T, dz.data() + (i % sets) * T * E, router, dout.data(), s); };
      experts.reserve(T, k);
      const int inner = T <= 64 ? 8 * sets : sets;
      const double route = time_ms(s, iters, inner, [&](int i) {
        router.route(dz.data() + (i % sets) * T * E, T, di.data(), dw.data(), s);
      });
      constexpr int kChoices = 6, kAuto = kChoices - 1;
      double by_tiles[kChoices] = {};
      const cuda::TileChoice choices[kChoices] = {cuda::TileChoice::tiny,  cuda::TileChoice::deep,
                                                  cuda::TileChoice::small, cuda::TileChoice::large,
                                                  cuda::TileChoice::wide,  cuda::TileChoice::automatic};
      const char* names[kChoices] = {"tiny", "deep", "small", "large", "wide", "auto"};
      for (int c = 0; c < kChoices; ++c) {
        if (std::find(tile_names.begin(), tile_names.end(), names[c]) == tile_names.end()) continue;
        experts.set_tiles(choices[c]);
        for (int i = 0; i < 3; ++i) fwd(i);
        ck(cudaStreamSynchronize(s), "warm-up");
        by_tiles[c] = time_ms(s, iters, inner, fwd);
      }
      // the same forwards captured once: a graph of `sets` forwards, replayed
      experts.set_tiles(cuda::TileChoice::automatic);
      cudaGraph_t g;
      cudaGraphExec_t ge;
      ck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
      for (int i = 0; i < sets; ++i) fwd(i);
      ck(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
      ck(cudaGraphInstantiate(&ge, g, 0), "cudaGraphInstantiate");
      ck(cudaGraphLaunch(ge, s), "cudaGraphLaunch");
      const double graph = time_ms(s, iters, std::max(1, inner / sets), [&](int) { ck(cudaGraphLaunch(ge, s), "cudaGraphLaunch"); }) / sets;
      cudaGraphExecDestroy(ge);
      cudaGraphDestroy(g);
      const double best = (by_tiles[kAuto] > 0 ? std::min(by_tiles[kAuto], graph) : graph) * 1e-3;
      const double flops = 2.0 * T * k * (2.0 * I * H + static_cast<double>(H) * I);
      char cell[kChoices][16];
      for (int c = 0; c < kChoices; ++c)
        std::snprintf(cell[c], sizeof cell[c], by_tiles[c] > 0 ? "%.1f" : "-", by_tiles[c] * 1e3);
      std::printf("%8lld %9.1f %9s %9s %9s %9s %9s %9s %9.1f %8.1f %12.0f %8.1f\n", (long long)T, route * 1e3, cell[0],
                  cell[1], cell[2], cell[3], cell[4], cell[5], graph * 1e3, distinct, distinct * expert_bytes / best / 1e9, flops / best / 1e12);
    }
  });
  std::printf("(auto and graph: the engine's own tile choice; weight GB/s and TFLOP/s from the better of the two)\n");
  cudaStreamDestroy(s);
  return 0;
} catch (const std::exception& e) {  // a CUDA error in the measuring code (gpu_limits.hpp), a bad store
  std::fprintf(stderr, "polymoe_cuda_bench: %s\n", e.what());
  return 1;
}
