// bench_amx: the AMX row-block kernels of kernel::tiled_amx alone (no routing, no epilogue), so
// that their rate can be read against the machine's own tile peak and DRAM bandwidth, measured in
// the same run (bench/limits.hpp). Each thread multiplies its own row block (m rows, K) by
// 64-column panels in the layouts of amx.hpp:
//   hot    : two panels, used alternately (operands in L1/L2): the kernel's compute rate;
//   stream : the thread's share of 1 GiB of panels, walked in order (weights from DRAM, as the
//            forward of a layer whose weights exceed the LLC).
// Variants, alternating in rounds (each keeps its best round): amx::block (1x4 register blocking,
// slabs of 8 k-blocks), amx::block22 (2x2) as the forward runs it (`lib`), and other slab lengths
// and step orders. Before timing, every variant's result is compared bit for bit with block's.
//
//   bench_amx [--threads 1,16] [--seconds 0.1]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <polymoe/kernels/tiled/amx.hpp>

#include "limits.hpp"

#if !defined(POLYMOE_TILED_AMX_CODE)
int main() {
  std::printf("bench_amx: this build has no AMX code (needs AVX-512 on x86-64 Linux)\n");
  return 0;
}
#else

using namespace polymoe;
using namespace polymoe::kernels::tiled;

namespace {

/// The library's operand types for one tile type, and its C type.
template <bool Int8>
struct Ops;

template <>
struct Ops<false> {
  using lib = amx::bf16_ops;
  using c_type = float;
};

template <>
struct Ops<true> {
  using lib = amx::int8_ops;
  using c_type = std::int32_t;
};

template <class O>
using a_type = typename O::lib::a_type;
template <class O>
using b_type = typename O::lib::b_type;

template <bool Int8>
using Kernel = void (*)(const a_type<Ops<Int8>>*, index_t, index_t, index_t, const b_type<Ops<Int8>>*,
                        typename Ops<Int8>::c_type*);

/// The variants, named, the first (amx::block) the one the others are checked against.
template <bool Int8>
std::vector<std::pair<const char*, Kernel<Int8>>> variants() {
  using L = typename Ops<Int8>::lib;
  using C = typename Ops<Int8>::c_type;
  return {
      {"1x4 s8", &amx::block<L, amx::slab_kb, C>},
      {"1x4 s16", &amx::block<L, 16, C>},
      {"2x2 s8 lib", &amx::block22<L, amx::slab22_kb, false, C>},
      {"2x2 s16", &amx::block22<L, 16, false, C>},
      {"2x2c s8", &amx::block22<L, 8, true, C>},
      {"2x2 s32", &amx::block22<L, 32, false, C>},
  };
}

template <bool Int8>
void run(const std::vector<long>& threads, double seconds, std::vector<bench::Limits>& limits) {
  using O = Ops<Int8>;
  const char* type = Int8 ? "int8" : "bf16";
  const std::size_t stream_bytes = std::size_t{1} << 30;
  for (std::size_t ti = 0; ti < threads.size(); ++ti) {
    const int nt = static_cast<int>(threads[ti]);
    bench::Limits& lim = limits[ti];
    const double peak_now = Int8 ? (lim.amx(), lim.amx_int8_gops) : lim.amx();
    std::printf("%s, %d thread(s): AMX peak %.0f (best %.0f) G/s, DRAM %.1f GB/s\n", type, nt,
                Int8 ? lim.amx_int8_gops : peak_now, Int8 ? lim.amx_int8_gops : lim.amx_bf16_gflops, lim.dram_gbs);
    for (const index_t K : {index_t{768}, index_t{2048}}) {
      const index_t nkb = K / O::lib::a_k, panel_elems = nkb * O::lib::b_kb;
      const std::size_t panel_bytes = static_cast<std::size_t>(panel_elems) * sizeof(b_type<O>);
      const std::size_t per_thread = stream_bytes / static_cast<std::size_t>(nt) / panel_bytes;
      // panels: [thread][per_thread] in one buffer, values small and varied
      std::unique_ptr<b_type<O>[], void (*)(void*)> panels(
          static_cast<b_type<O>*>(std::aligned_alloc(4096, per_thread * nt * panel_bytes)), &std::free);
      bench::run_together(nt, [&](int t) {
        auto* p = panels.get() + static_cast<std::size_t>(t) * per_thread * static_cast<std::size_t>(panel_elems);
        for (std::size_t i = 0; i < per_thread * static_cast<std::size_t>(panel_elems); ++i)
          p[i] = static_cast<b_type<O>>(Int8 ? (i * 7 % 15) : 0x3f80 + (i % 5));
      });
      const index_t lda_bytes = amx_row_stride_bytes(K * static_cast<index_t>(sizeof(a_type<O>)));
      const index_t lda = lda_bytes / static_cast<index_t>(sizeof(a_type<O>));
      // every variant's result against lib's, bit for bit (same products, same order of sums), on
      // row counts with and without an odd last row group
      for (const index_t m : {index_t{16}, index_t{48}, index_t{128}}) {
        std::vector<a_type<O>> a(static_cast<std::size_t>((m + 16) * lda));
        for (std::size_t i = 0; i < a.size(); ++i)
          a[i] = static_cast<a_type<O>>(Int8 ? (i * 13 % 251) : 0x3f00 + (i * 7 % 255));
        std::vector<std::vector<typename O::c_type>> out;
        for (const auto& [name, kernel] : variants<Int8>()) {
          out.emplace_back(static_cast<std::size_t>((m + 15) / 16 * 16 * panel_cols));
          bench::run_together(1, [&, kernel = kernel](int) {
            amx::configure();
            kernel(a.data(), lda, m, nkb, panels.get(), out.back().data());
          });
          if (std::memcmp(out.back().data(), out.front().data(), out.front().size() * sizeof(typename O::c_type)) != 0) {
            std::printf("bench_amx: %s variant %s differs from 1x4 s8 at K=%ld m=%ld\n", type, name, static_cast<long>(K),
                        static_cast<long>(m));
            std::exit(1);
          }
        }
      }
      for (const index_t m : {index_t{32}, index_t{128}}) {
        std::vector<std::unique_ptr<a_type<O>[], void (*)(void*)>> as;
        std::vector<std::unique_ptr<typename O::c_type[], void (*)(void*)>> cs;
        for (int t = 0; t < nt; ++t) {
          as.emplace_back(static_cast<a_type<O>*>(std::aligned_alloc(64, static_cast<std::size_t>((m + 16) * lda_bytes))),
                          &std::free);
          std::memset(as.back().get(), 1, static_cast<std::size_t>((m + 16) * lda_bytes));
          cs.emplace_back(static_cast<typename O::c_type*>(std::aligned_alloc(64, static_cast<std::size_t>(m * panel_cols * 4))),
                          &std::free);
        }
        const double ops_per_call = 2.0 * static_cast<double>(m) * static_cast<double>(K) * panel_cols;
        for (const bool stream : {false, true}) {
          // the variants alternate within each of four rounds; each keeps its best time. Calls per
          // thread: about `seconds` at 40 % of the per-thread peak, whole passes when streaming.
          const auto vs = variants<Int8>();
          long calls = std::max(16L, static_cast<long>(seconds * 0.4 * peak_now / nt * 1e9 / ops_per_call));
          if (stream) calls = std::max<long>(calls / static_cast<long>(per_thread), 1) * static_cast<long>(per_thread);
          std::vector<double> best_s(vs.size(), 1e30);
          for (int round = 0; round < 4; ++round)
            for (std::size_t vi = 0; vi < vs.size(); ++vi) {
              const Kernel<Int8> kernel = vs[vi].second;
              const double s = bench::run_together(nt, [&](int t) {
                const auto* base = panels.get() + static_cast<std::size_t>(t) * per_thread * static_cast<std::size_t>(panel_elems);
                for (long i = 0; i < calls; ++i) {
                  const std::size_t pi = stream ? static_cast<std::size_t>(i) % per_thread : static_cast<std::size_t>(i & 1);
                  kernel(as[static_cast<std::size_t>(t)].get(), lda, m, nkb, base + pi * static_cast<std::size_t>(panel_elems),
                         cs[static_cast<std::size_t>(t)].get());
                }
              });
              best_s[vi] = std::min(best_s[vi], s);
            }
          for (std::size_t vi = 0; vi < vs.size(); ++vi) {
            const double best = best_s[vi];
            const double gops = ops_per_call * static_cast<double>(calls) * nt / best / 1e9;
            const double peak = Int8 ? lim.amx_int8_gops : lim.amx_bf16_gflops;
            const double gbs = static_cast<double>(panel_bytes) * static_cast<double>(calls) * nt / best / 1e9;
            std::printf("  %s %-6s K=%4ld m=%3ld thr=%2d %-10s %9.0f G/s %5.1f %%AMX   B %6.1f GB/s %5.1f %%DRAM\n", type,
                        stream ? "stream" : "hot", static_cast<long>(K), static_cast<long>(m), nt, vs[vi].first, gops,
                        100.0 * gops / peak, gbs, 100.0 * gbs / lim.dram_gbs);
            std::fflush(stdout);
          }
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<long> threads = {1, 16};
  double seconds = 0.1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads")
      threads = bench::comma_list(argv[i + 1]);
    else if (a == "--seconds")
      seconds = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "bench_amx: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (const char* why = amx_unavailable_reason()) {
    std::printf("bench_amx: AMX cannot run here: %s\n", why);
    return 0;
  }
  std::vector<bench::Limits> limits;
  for (const long t : threads) {
    bench::Limits l;
    l.threads = static_cast<int>(t);
    l.dram();
    l.amx();
    limits.push_back(l);
  }
  run<false>(threads, seconds, limits);
  run<true>(threads, seconds, limits);
  for (const auto& l : limits)
    std::printf("limits, best of the run, %d thread(s): AMX %.0f bf16 / %.0f int8, DRAM %.1f GB/s\n", l.threads,
                l.amx_bf16_gflops, l.amx_int8_gops, l.dram_gbs);
  return 0;
}

#endif
