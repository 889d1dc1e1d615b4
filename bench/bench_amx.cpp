// bench_amx: the AMX row-block kernels of kernel::tiled_amx alone (no routing, no epilogue), so
// that their rate can be read against the machine's own tile peak and DRAM bandwidth, measured in
// the same run (bench/limits.hpp). Each thread multiplies its own row block (m rows, K) by
// 64-column panels in the layouts of amx.hpp:
//   hot    : two panels, used alternately (operands in L1/L2): the kernel's compute rate;
//   stream : the thread's share of 1 GiB of panels, walked in order (weights from DRAM, as the
//            forward of a layer whose weights exceed the LLC).
// Variants, alternating in rounds (each keeps its best round): amx::block22 (2x2 register
// blocking, slabs of 8 k-blocks) as the forward runs it (`lib`: after a panel's last slab it
// fetches the first of the panel multiplied next) and a second copy of its code (`copy`), without
// the next panel (`nonext`, the loop before), and other hints of the next slab's prefetch; and for
// bf16 the decode path (one row, AVX-512) with its prefetch variants, streamed. (The 1x4 loop and
// column pairs outer, which docs/decisions.md#amx-loop compared, are no longer in the tree.)
// Before timing, every variant's result is compared bit for bit with the first of its list.
//
// With --peaks it prints only the tile peaks: limits.hpp's (the best of five short bursts on zero
// operands) against the rate held for 0.3 s on every thread with zero and with random operands.
//
// With --pair A,B it times only variants A and B, streamed, 32 and 128 rows, in rounds of A B B A
// (--rounds, 15), and prints the median and quartiles of the per-round rate of B over A: on a
// machine whose speed moves within seconds, a paired ratio resolves what best-of-rounds does not.
//
// With --formats it times the library's loop on bf16 and int8 operands of the same bytes (see
// formats()), in rounds (--rounds).
//
// With --threshold FORMAT (mxfp4, nvfp4 or fp8: weight-only, fp32 activations; nvfp4_w4a4: NVFP4
// activations; fp8_w8a8: E4M3 activations in groups of 128; mxfp4_bf16, nvfp4_bf16, fp8_bf16:
// weight-only with rows of bf16 values, which the tiles take as the hi terms alone) it times, for
// row blocks of 1 to 16 rows, the two ways kernel::tiled_amx can
// multiply a block by a quantized panel: kernel::tiled's AVX-512 path (detail::block_times_panel on
// fp32 rows) and the tiles on decoded slabs (split rows, or W4A4's e2m1 · e4m3 rows, or W8A8's
// E4M3 rows), each thread
// streaming its share of 1 GiB of panels, in rounds of A B B A, and prints the median and quartiles
// of the time of the AVX-512 path over the tiles' (above 1: the tiles are faster). The layer's threshold (amx_min_rows_*) is the smallest m where
// the tiles win.
//
// With --decomp FORMAT (mxfp4 or nvfp4) it splits the time of a row block of at most 16 rows on an
// E2M1 panel into the decode and the tiles (see decomposition()).
//
//   bench_amx [--threads 1,16] [--seconds 0.1] [--peaks] [--pair A,B [--rounds 15]] [--formats]
//             [--threshold mxfp4|nvfp4|nvfp4_w4a4|fp8|fp8_w8a8|mxfp4_bf16|nvfp4_bf16|fp8_bf16 [--k 2048]]
//             [--decomp mxfp4|nvfp4 [--k 2048]]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <polymoe/kernels/tiled/amx.hpp>
#include <polymoe/kernels/tiled/amx_e2m1.hpp>
#include <polymoe/kernels/tiled/amx_e4m3.hpp>

#include "cli11_support.hpp"
#include "limits.hpp"

#if !POLYMOE_TILED_AMX_CODE
int main(int argc, char** argv) {
  CLI::App app("bench_amx: the AMX row-block kernels of kernel::tiled_amx alone", "bench_amx");
  polymoe::programs::set_up(app, POLYMOE_VERSION_STRING, POLYMOE_GIT_COMMIT);
  app.allow_extras();  // the options of a build with AMX code: this one has nothing to time
  if (const auto status = polymoe::programs::parse(app, argc, argv, 2)) return *status;
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

/// A row-block kernel: (A, lda, m, nkb, panel, the panel multiplied next, C).
template <bool Int8>
using Kernel = void (*)(const a_type<Ops<Int8>>*, index_t, index_t, index_t, const b_type<Ops<Int8>>*,
                        const b_type<Ops<Int8>>*, typename Ops<Int8>::c_type*);

/// block22 as the library runs it, told of the next panel (Next) or of none, as a second copy of
/// its code: `copy` is the control for --pair (two variants that differ only in where their code
/// lies), `nonext` the loop before the next panel was fetched.
template <class L, class C, bool Next>
__attribute__((target("amx-tile,amx-bf16,amx-int8"))) void lib_copy(const typename L::a_type* a, index_t lda,
                                                                      index_t m, index_t nkb,
                                                                      const typename L::b_type* panel,
                                                                      const typename L::b_type* next, C* c) {
  amx::block22<L, Pf::t0, C>(a, lda, m, nkb, panel, Next ? next : nullptr, c);
}

/// The variants, named, the first (the library's) the one the others are checked against.
template <bool Int8>
std::vector<std::pair<const char*, Kernel<Int8>>> variants() {
  using L = typename Ops<Int8>::lib;
  using C = typename Ops<Int8>::c_type;
  return {
      {"2x2 s8 lib", &amx::block22<L, Pf::t0, C>},
      {"2x2 s8 copy", &lib_copy<L, C, true>},
      {"2x2 s8 nonext", &lib_copy<L, C, false>},
      {"2x2 s8 pfT2", &amx::block22<L, Pf::t2, C>},
      {"2x2 s8 nopf", &amx::block22<L, Pf::none, C>},
  };
}

/// The decode path (one row, AVX-512, no tiles) with a prefetch variant, called as a row-block
/// kernel.
template <Pf P, index_t Ahead>
void decode_row(const std::uint16_t* a, index_t, index_t, index_t nkb, const std::uint16_t* panel,
                const std::uint16_t*, float* c) {
  const std::uint16_t* rows[1] = {a};
  amx_layout_decode_dp<1, P, Ahead>(rows, nkb * amx_kb, panel, c);
}

/// Its variants, the first (t0, 4 KiB ahead) the library's.
std::vector<std::pair<const char*, Kernel<false>>> decode_variants() {
  return {
      {"dec t0 4K lib", &decode_row<Pf::t0, 4096>}, {"dec t0 8K", &decode_row<Pf::t0, 8192>},
      {"dec t2 4K", &decode_row<Pf::t2, 4096>},     {"dec t2 8K", &decode_row<Pf::t2, 8192>},
      {"dec nta 4K", &decode_row<Pf::nta, 4096>},   {"dec none", &decode_row<Pf::none, 4096>},
  };
}

/// The next random operand of a linear congruential stream x: for int8 any two bytes; for bf16 a
/// value of either sign with magnitude in [2^-8, 2) (exponent 119-127, any mantissa), so no NaN,
/// Inf or denormal.
std::uint16_t random_operand(std::uint32_t& x, bool int8) {
  x = x * 1664525u + 1013904223u;
  const std::uint32_t r = x >> 8;
  return int8 ? static_cast<std::uint16_t>(r) : static_cast<std::uint16_t>((r & 0x807f) | ((119 + r % 9) << 7));
}

/// The tile rate held for `seconds` on every thread (not the best of five short bursts, as
/// limits.hpp), with zero or random operands: G op/s.
template <bool Int8>
double sustained_peak(int threads, bool random, double seconds, double burst_gops) {
  alignas(64) static std::uint16_t operands[3 * 512];
  std::uint32_t x = 12345;
  for (auto& v : operands) v = random_operand(x, Int8);
  const double per_product = Int8 ? 2.0 * 16 * 16 * 64 : 2.0 * 16 * 16 * 32;
  const long iters = std::max(1000L, static_cast<long>(seconds * burst_gops * 1e9 / threads / (4 * per_product)));
  std::vector<float> sink(static_cast<std::size_t>(threads));
  const double t = bench::run_together(threads, [&](int id) {
    sink[static_cast<std::size_t>(id)] = bench::amx_products<Int8>(iters, random ? operands : nullptr);
  });
  if (sink[0] == 42) std::printf(" ");
  return 4.0 * per_product * static_cast<double>(iters) * threads / t / 1e9;
}

/// --peaks: the burst peaks of limits.hpp against the rate held for 0.3 s, zero and random operands.
void peaks(const std::vector<long>& threads) {
  for (const long t : threads) {
    bench::Limits l;
    l.threads = static_cast<int>(t);
    l.amx();
    for (const bool int8 : {false, true}) {
      const double burst = int8 ? l.amx_int8_gops : l.amx_bf16_gflops;
      const auto held = [&](bool random) {
        return int8 ? sustained_peak<true>(l.threads, random, 0.3, burst) : sustained_peak<false>(l.threads, random, 0.3, burst);
      };
      const double zero = held(false), rnd = held(true);
      std::printf("peaks %s %2ld thread(s): burst (zero operands, best of 5) %6.0f G/s; held 0.3 s: zero operands %6.0f "
                  "(%5.1f %%), random operands %6.0f (%5.1f %%)\n",
                  int8 ? "int8" : "bf16", t, burst, zero, 100 * zero / burst, rnd, 100 * rnd / burst);
      std::fflush(stdout);
    }
  }
}

/// --formats: the library's loop (block22) on bf16 and on int8 operands of the same bytes — the
/// int8 K twice the bf16 K, so that both run the same k-blocks, the same tile loads and the same
/// number of tile products, and differ only in the product instruction (tdpbusd does twice the
/// operations of tdpbf16ps) and in the operands' values — in rounds of bf16 int8 int8 bf16.
/// Per round: the time of bf16 over the time of int8 (1.0: int8 at twice the operations per
/// second). Operands `random` (uniform bytes for int8; bf16 of either sign with magnitude in
/// [2^-8, 2)) or `const` (every byte of A 1, the weights a short cycle of small values, as the
/// other modes).
void formats(const std::vector<long>& threads, int rounds) {
  struct Side {
    std::size_t panel_bytes = 0, per_thread = 0;
    std::unique_ptr<char[], void (*)(void*)> panels{nullptr, &std::free};
    std::vector<std::unique_ptr<char[], void (*)(void*)>> as, cs;
  };
  const std::size_t stream_bytes = std::size_t{1} << 30;
  for (const long t : threads) {
    const int nt = static_cast<int>(t);
    for (const index_t nkb : {index_t{12}, index_t{32}})
      for (const bool random : {true, false}) {
        // side 0 bf16 (K = 32 nkb), side 1 int8 (K = 64 nkb): K rows of 64 bytes either way
        const index_t row_bytes = nkb * 64, lda_bytes = amx_row_stride_bytes(row_bytes);
        Side side[2];
        for (int s = 0; s < 2; ++s) {
          Side& d = side[s];
          d.panel_bytes = static_cast<std::size_t>(nkb * amx::kb_bytes);
          d.per_thread = stream_bytes / static_cast<std::size_t>(nt) / d.panel_bytes;
          d.panels.reset(static_cast<char*>(std::aligned_alloc(4096, d.per_thread * static_cast<std::size_t>(nt) * d.panel_bytes)));
          bench::run_together(nt, [&](int id) {
            const std::size_t n = d.per_thread * d.panel_bytes / 2, base = static_cast<std::size_t>(id) * n;
            auto* p = reinterpret_cast<std::uint16_t*>(d.panels.get()) + base;
            std::uint32_t x = 12345u + static_cast<std::uint32_t>(id);
            for (std::size_t i = 0; i < n; ++i)
              p[i] = random ? random_operand(x, s == 1)
                            : static_cast<std::uint16_t>(s == 1 ? ((i * 7 % 15) | ((i * 5 % 13) << 8)) : 0x3f80 + (i % 5));
          });
          for (int id = 0; id < nt; ++id) {
            const auto a_bytes = static_cast<std::size_t>((256 + 16) * lda_bytes);
            d.as.emplace_back(static_cast<char*>(std::aligned_alloc(64, a_bytes)), &std::free);
            auto* a = reinterpret_cast<std::uint16_t*>(d.as.back().get());
            std::uint32_t x = 777u + static_cast<std::uint32_t>(id);
            for (std::size_t i = 0; i < a_bytes / 2; ++i) a[i] = random ? random_operand(x, s == 1) : std::uint16_t{0x0101};
            d.cs.emplace_back(static_cast<char*>(std::aligned_alloc(64, 256 * panel_cols * 4)), &std::free);
          }
        }
        for (const index_t m : {index_t{32}, index_t{128}, index_t{256}})
          for (const bool stream : {false, true}) {
            const double products = static_cast<double>(nkb) * 4.0 * static_cast<double>((m + 15) / 16);
            const long per = static_cast<long>(side[0].per_thread);
            long calls = stream ? per : 64;  // a probe: one pass, or 64 calls
            const auto time_side = [&](int s) {
              Side& d = side[s];
              return bench::run_together(nt, [&](int id) {
                const char* base = d.panels.get() + static_cast<std::size_t>(id) * d.per_thread * d.panel_bytes;
                const auto pi = [&](long j) { return stream ? static_cast<std::size_t>(j % per) : static_cast<std::size_t>(j & 1); };
                const auto lda_el = [&](std::size_t el) { return static_cast<index_t>(static_cast<std::size_t>(lda_bytes) / el); };
                for (long i = 0; i < calls; ++i) {
                  const char* p = base + pi(i) * d.panel_bytes;
                  const char* q = base + pi(i + 1) * d.panel_bytes;
                  if (s == 0)
                    amx::block22<amx::bf16_ops, Pf::t0>(
                        reinterpret_cast<const std::uint16_t*>(d.as[static_cast<std::size_t>(id)].get()), lda_el(2), m,
                        nkb, reinterpret_cast<const std::uint16_t*>(p), reinterpret_cast<const std::uint16_t*>(q),
                        reinterpret_cast<float*>(d.cs[static_cast<std::size_t>(id)].get()));
                  else
                    amx::block22<amx::int8_ops, Pf::t0>(
                        reinterpret_cast<const std::uint8_t*>(d.as[static_cast<std::size_t>(id)].get()), lda_el(1), m,
                        nkb, reinterpret_cast<const std::int8_t*>(p), reinterpret_cast<const std::int8_t*>(q),
                        reinterpret_cast<std::int32_t*>(d.cs[static_cast<std::size_t>(id)].get()));
                }
              });
            };
            // calls per timing: about 0.05 s by the probe's bf16 rate (streamed: whole passes)
            const double probe = time_side(0);
            calls = std::max(1L, static_cast<long>(0.05 / probe * static_cast<double>(calls)));
            if (stream) calls = std::max(calls / per, 1L) * per;
            std::vector<double> ratio, prod_rate;
            for (int r = 0; r < rounds; ++r) {
              const double b1 = time_side(0), i1 = time_side(1), i2 = time_side(1), b2 = time_side(0);
              ratio.push_back((b1 + b2) / (i1 + i2));
              prod_rate.push_back(2.0 * products * static_cast<double>(calls) * nt / (b1 + b2) / 1e9);
            }
            const auto q = [&](double f) { return bench::quantile(ratio, f); };
            const double rate = bench::quantile(prod_rate, 0.5);
            std::printf("formats thr=%2d kb=%2ld m=%3ld %-6s %-6s time bf16/int8 median %.3f, quartiles %.3f-%.3f, "
                        "range %.3f-%.3f (%d rounds; bf16 median %.2f G tile products/s, weight bytes consumed at %.1f GB/s)\n",
                        nt, static_cast<long>(nkb), static_cast<long>(m), stream ? "stream" : "hot",
                        random ? "random" : "const", q(0.5), q(0.25), q(0.75), q(0.0), q(1.0), rounds, rate,
                        rate * 1024 / static_cast<double>((m + 15) / 16));
            std::fflush(stdout);
          }
      }
  }
}

/// `per` panels of format F: codes[per · code_bytes] (random; E4M3 without NaN or subnormal
/// codes) and scales[per · scale_count] as a checkpoint's (E8M0 near 2^0, unsigned E4M3 from 0.25
/// to 4, fp32 near 1e-2), from the generator next().
template <class F, class Next>
void random_panels(std::size_t per, std::size_t code_bytes, std::size_t scale_count, Next& next,
                   AlignedBuffer<std::uint8_t>& codes, AlignedBuffer<typename F::scale_type>& scales) {
  using scale_t = typename F::scale_type;
  codes = AlignedBuffer<std::uint8_t>(per * code_bytes);
  for (std::size_t j = 0; j < per * code_bytes; ++j) {
    auto b = static_cast<std::uint8_t>(next());
    if constexpr (F::code == qcode::e4m3)
      if ((b & 0x7F) == 0x7F || (b & 0x78) == 0) b = 0x38;  // no NaN codes, no subnormals (a checkpoint's
                                                             // are rare; kernel::tiled's fp32 widening
                                                             // takes a microcode assist on each)
    codes.data()[j] = b;
  }
  scales = AlignedBuffer<scale_t>(per * scale_count);
  for (std::size_t j = 0; j < per * scale_count; ++j) {
    if constexpr (F::scale == qscale::f32)
      scales.data()[j] = 1e-2f * static_cast<float>(1 + next() % 8);
    else if constexpr (F::scale == qscale::e8m0)
      scales.data()[j] = static_cast<scale_t>(124 + next() % 6);
    else
      scales.data()[j] = static_cast<scale_t>(0x28 + next() % 32);
  }
}

/// Decodes a whole E2M1 panel of K rows a 32 KiB slab at a time into `slab` (the decode alone, as
/// the slab loop runs it); returns one decoded value (word j % 64) so that the work is kept.
template <class F>
float decode_panel(const QPanel<F>& panel, index_t K, std::uint16_t* slab, std::size_t j) noexcept {
  const index_t nkb = padded_k32(K) / amx_kb;
  for (index_t s0 = 0; s0 < nkb; s0 += amx::slab_kb) decode_e2m1_slab(panel, K, s0, std::min(nkb, s0 + amx::slab_kb), slab);
  return slab[j % 64];
}

/// --decomp mxfp4|nvfp4: where an E2M1 row block of m <= 16 rows spends its time, per thread in ns
/// per k-block (2048 weights): the decode alone (decode_e2m1_slab), the tiles alone
/// (amx::decoded_row_group with nothing left to decode after its first two k-blocks), the two in
/// the row-group loop, and the slab loop (decoded 32 KiB slabs, then their tiles); each thread
/// streaming its share of 1 GiB of panels, and on two panels in cache. Medians of `rounds`.
template <class F>
void decomposition(const char* name, const std::vector<long>& threads, index_t K, int rounds) {
  const index_t K32 = padded_k32(K), nkb = K32 / amx_kb, lda = amx_row_stride_bytes(4 * K32) / 2;
  const std::size_t code_bytes = static_cast<std::size_t>(K * F::row_bytes);
  const std::size_t scale_count = static_cast<std::size_t>(F::groups(K) * panel_cols);
  const std::size_t panel_bytes = code_bytes + scale_count * sizeof(typename F::scale_type);
  for (const long t : threads) {
    const int nt = static_cast<int>(t);
    const std::size_t per = std::max<std::size_t>(2, (std::size_t{1} << 30) / static_cast<std::size_t>(nt) / panel_bytes);
    std::vector<AlignedBuffer<std::uint8_t>> codes(static_cast<std::size_t>(nt));
    std::vector<AlignedBuffer<typename F::scale_type>> scales(static_cast<std::size_t>(nt));
    std::vector<AlignedBuffer<std::uint16_t>> a(static_cast<std::size_t>(nt));
    std::vector<AlignedBuffer<float>> c(static_cast<std::size_t>(nt));
    bench::run_together(nt, [&](int id) {
      const auto i = static_cast<std::size_t>(id);
      std::uint32_t r = 88675123u + static_cast<std::uint32_t>(id);
      const auto next = [&] { return r ^= r << 13, r ^= r >> 17, r ^= r << 5; };
      random_panels<F>(per, code_bytes, scale_count, next, codes[i], scales[i]);
      std::vector<float> x(static_cast<std::size_t>(K));
      a[i] = AlignedBuffer<std::uint16_t>(static_cast<std::size_t>(32 * lda));
      std::fill_n(a[i].data(), a[i].size(), std::uint16_t{0});
      for (index_t row = 0; row < 16; ++row) {
        for (auto& v : x) v = static_cast<float>(static_cast<int>(next() % 2001) - 1000) * 1e-3f;
        split_bf16_row(x.data(), 1.0f, K, K32, a[i].data() + row * lda);
      }
      c[i] = AlignedBuffer<float>(static_cast<std::size_t>(amx_block_rows * panel_cols));
    });
    static constexpr const char* what[] = {"decode alone", "tiles alone", "row-group loop", "slab loop"};
    for (const bool hot : {false, true})
      for (const index_t m : {index_t{1}, index_t{8}, index_t{16}})
        for (int v = 0; v < 4; ++v) {
          if (v == 0 && m > 1) continue;  // the decode does not depend on m
          std::vector<double> ns;
          for (int round = 0; round <= rounds; ++round) {
            const double s = bench::run_together(nt, [&](int id) {
              const auto i = static_cast<std::size_t>(id);
              alignas(64) std::uint16_t slab[amx::slab_kb * 4 * amx_tile_elems];
              for (std::size_t j = 0; j < per; ++j) {
                const std::size_t jj = hot ? j % 2 : j;
                const QPanel<F> panel{codes[i].data() + jj * code_bytes, scales[i].data() + jj * scale_count, 0.5f};
                if (v == 0) {
                  c[i].data()[0] += decode_panel(panel, K, slab, j);
                } else if (v == 1) {
                  e2m1_decoder<F> decoder(panel, K);
                  amx::decoded_row_group<amx::bf16x2_ops>(
                      a[i].data(), lda, nkb,
                      [&](index_t kb, index_t j0, index_t j1, std::uint16_t* out) {
                        if (kb < 2) decoder(kb, j0, j1, out);
                      },
                      c[i].data());
                } else {
                  kernels::tiled::detail::e2m1_block_times_panel(m, a[i].data(), lda, nullptr, K, panel, c[i].data(), v == 2);
                }
              }
            });
            if (round > 0) ns.push_back(s * 1e9 / static_cast<double>(per * static_cast<std::size_t>(nkb)));  // round 0: warm-up
          }
          std::printf("decomp %-5s thr=%2d K=%ld %s m=%2ld %-14s %7.1f ns per k-block per thread (quartiles %.1f-%.1f)\n",
                      name, nt, static_cast<long>(K), hot ? "in cache" : "streamed", static_cast<long>(m), what[v],
                      bench::quantile(ns, 0.5), bench::quantile(ns, 0.25), bench::quantile(ns, 0.75));
          std::fflush(stdout);
        }
  }
}

/// --threshold: kernel::tiled's path against the tiles for blocks of few rows, on panels of format
/// F with K rows (see the top of this file).
template <class F>
void threshold(const char* name, const std::vector<long>& threads, index_t K, int rounds, bool qact = false,
               bool bf16_rows = false) {
  using scale_t = typename F::scale_type;
  const index_t groups = F::groups(K), K32 = padded_k32(K), lda = amx_row_stride_bytes(4 * K32) / 2;
  const std::size_t code_bytes = static_cast<std::size_t>(K * F::row_bytes);
  const std::size_t scale_count = static_cast<std::size_t>(groups * panel_cols);
  const std::size_t panel_bytes = code_bytes + scale_count * sizeof(scale_t);
  const std::size_t stream_bytes = std::size_t{1} << 30;
  for (const long t : threads) {
    const int nt = static_cast<int>(t);
    const std::size_t per = std::max<std::size_t>(2, stream_bytes / static_cast<std::size_t>(nt) / panel_bytes);
    // per thread: its panels' codes, then their scales (values as a checkpoint's: E8M0 near 2^0,
    // unsigned E4M3 from 0.25 to 4, fp32 near 1e-2), fp32 rows and their split copies, a result
    std::vector<AlignedBuffer<std::uint8_t>> codes(static_cast<std::size_t>(nt));
    std::vector<AlignedBuffer<scale_t>> scales(static_cast<std::size_t>(nt));
    std::vector<AlignedBuffer<float>> x(static_cast<std::size_t>(nt)), c(static_cast<std::size_t>(nt));
    std::vector<AlignedBuffer<std::uint16_t>> a(static_cast<std::size_t>(nt));
    // the rows' activation scales (qact): W4A4's scale_2 per row, W8A8's per group of 128
    std::vector<std::vector<float>> sa(static_cast<std::size_t>(nt),
                                       std::vector<float>(static_cast<std::size_t>(16 * groups), 1.0f));
    bench::run_together(nt, [&](int id) {
      const auto i = static_cast<std::size_t>(id);
      std::uint32_t r = 2463534242u + static_cast<std::uint32_t>(id);
      const auto next = [&] { return r ^= r << 13, r ^= r >> 17, r ^= r << 5; };
      random_panels<F>(per, code_bytes, scale_count, next, codes[i], scales[i]);
      x[i] = AlignedBuffer<float>(static_cast<std::size_t>(16 * K));
      a[i] = AlignedBuffer<std::uint16_t>(static_cast<std::size_t>(32 * lda));
      std::fill_n(a[i].data(), a[i].size(), std::uint16_t{0});
      for (index_t row = 0; row < 16; ++row) {
        float* xr = x[i].data() + row * K;
        for (index_t k = 0; k < K; ++k) xr[k] = static_cast<float>(static_cast<int>(next() % 2001) - 1000) * 1e-3f;
        if (bf16_rows)  // bf16 values (an engine's bf16 inputs): the tiles take the hi terms alone
          for (index_t k = 0; k < K; ++k) xr[k] = codecs::bf16_to_float(codecs::float_to_bf16(xr[k]));
        if (qact && F::code == qcode::e2m1)  // NVFP4 W4A4: the row's e2m1 · e4m3 values and its scale_2
          sa[i][static_cast<std::size_t>(row)] = quantize_nvfp4_tile_row(xr, 1.0f, K, K32, a[i].data() + row * lda);
        else if (qact)  // fp8 W8A8: the row's E4M3 values and its scales per group of 128
          quantize_e4m3_row(xr, 1.0f, K, K32, fp8_format::group, a[i].data() + row * lda,
                            sa[i].data() + row * groups);
        else
          split_bf16_row(xr, 1.0f, K, K32, a[i].data() + row * lda);
      }
      c[i] = AlignedBuffer<float>(static_cast<std::size_t>(amx_block_rows * panel_cols));
    });
    for (const index_t m : {index_t{1}, index_t{2}, index_t{3}, index_t{4}, index_t{6}, index_t{8}, index_t{12}, index_t{16}}) {
      // side 0: kernel::tiled's path; side 1: the tiles; side 2: the tiles' decode alone (E2M1),
      // side 3 the same on two panels (in cache); one pass over the thread's panels
      const auto time_side = [&](int side) {
        return bench::run_together(nt, [&](int id) {
          const auto i = static_cast<std::size_t>(id);
          const float* xs = x[i].data();
          alignas(64) std::uint16_t slab[amx::slab_kb * 4 * amx_tile_elems];
          for (std::size_t j = 0; j < per; ++j) {
            const std::size_t jj = side == 3 ? j % 2 : j;  // side 3: the decode on two panels in cache
            const QPanel<F> panel{codes[i].data() + jj * code_bytes, scales[i].data() + jj * scale_count, 0.5f};
            if constexpr (F::code == qcode::e2m1)
              if (side >= 2) {
                c[i].data()[0] += decode_panel(panel, K, slab, j);
                continue;
              }
            if (side == 0) {
              kernels::tiled::detail::block_times_panel(m, [&](index_t row) { return xs + row * K; }, K, panel, c[i].data(),
                                                        /*short_loops=*/true);
              continue;
            }
            // the tiles: W4A4's or W8A8's quantized rows (one term, with their scales), bf16 rows
            // (the hi terms alone) or split fp32 rows
            const float* s = qact ? sa[i].data() : nullptr;
            const auto tiles = [&]<class O>() {
              if constexpr (F::code == qcode::e2m1)
                kernels::tiled::detail::e2m1_block_times_panel<F, O>(m, a[i].data(), lda, s, K, panel, c[i].data());
              else
                kernels::tiled::detail::fp8_times_panel<O>(m, a[i].data(), lda, s, groups, K, panel, c[i].data());
            };
            if (qact)
              tiles.template operator()<amx::bf16_ops>();
            else if (bf16_rows)
              tiles.template operator()<amx::bf16x2_hi_ops>();
            else
              tiles.template operator()<amx::bf16x2_ops>();
          }
        });
      };
      time_side(0), time_side(1);  // warm-up
      std::vector<double> ratio;
      double fma_s = 0, tiles_s = 0;
      for (int r = 0; r < rounds; ++r) {
        const double f1 = time_side(0), t1 = time_side(1), t2 = time_side(1), f2 = time_side(0);
        ratio.push_back((f1 + f2) / (t1 + t2));
        fma_s += f1 + f2, tiles_s += t1 + t2;
      }
      double decode_s = 0, hot_s = 0;
      if constexpr (F::code == qcode::e2m1)
        if (m == 2)
          for (int r = 0; r < rounds; ++r) decode_s += 2 * time_side(2), hot_s += 2 * time_side(3);
      const auto q = [&](double f) { return bench::quantile(ratio, f); };
      const double bytes = static_cast<double>(per * panel_bytes) * nt * 2.0 * rounds;
      if (decode_s > 0)
        std::printf("threshold %-5s thr=%2d K=%ld the tiles' decode alone: weights at %.1f GB/s streamed, %.1f GB/s "
                    "in cache\n",
                    name, nt, static_cast<long>(K), bytes / decode_s / 1e9, bytes / hot_s / 1e9);
      std::printf("threshold %-5s thr=%2d K=%ld m=%2ld time avx512/tiles median %.3f, quartiles %.3f-%.3f, range "
                  "%.3f-%.3f (%d rounds; weights at %.1f GB/s avx512, %.1f GB/s tiles)\n",
                  name, nt, static_cast<long>(K), static_cast<long>(m), q(0.5), q(0.25), q(0.75), q(0.0), q(1.0),
                  rounds, bytes / fma_s / 1e9, bytes / tiles_s / 1e9);
      std::fflush(stdout);
    }
  }
}

template <bool Int8>
void run(const std::vector<long>& threads, double seconds, std::vector<bench::Limits>& limits,
         const std::pair<std::string, std::string>& pair, int pair_rounds) {
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
      // every variant's result against the first's, bit for bit (same products, same order of
      // sums), on row counts with and without an odd last row group
      const auto check = [&](const auto& vs, std::initializer_list<index_t> ms) {
        for (const index_t m : ms) {
          std::vector<a_type<O>> a(static_cast<std::size_t>((m + 16) * lda));
          for (std::size_t i = 0; i < a.size(); ++i)
            a[i] = static_cast<a_type<O>>(Int8 ? (i * 13 % 251) : 0x3f00 + (i * 7 % 255));
          // C 64-byte aligned, as the forward's (the decode path stores whole vectors)
          const auto c_bytes = static_cast<std::size_t>((m + 15) / 16 * 16 * panel_cols) * sizeof(typename O::c_type);
          std::vector<std::unique_ptr<typename O::c_type[], void (*)(void*)>> out;
          for (const auto& [name, kernel] : vs) {
            out.emplace_back(static_cast<typename O::c_type*>(std::aligned_alloc(64, c_bytes)), &std::free);
            std::memset(out.back().get(), 0, c_bytes);
            bench::run_together(1, [&, kernel = kernel](int) {
              amx::configure();
              kernel(a.data(), lda, m, nkb, panels.get(), panels.get() + panel_elems, out.back().get());
            });
            if (std::memcmp(out.back().get(), out.front().get(), c_bytes) != 0) {
              std::printf("bench_amx: %s variant %s differs from %s at K=%ld m=%ld\n", type, name, vs.front().first,
                          static_cast<long>(K), static_cast<long>(m));
              std::exit(1);
            }
          }
        }
      };
      // One case (m rows, hot or streamed): every thread's A rows and C, and the calls per thread
      // of one timing: about `seconds` at 40 % of the per-thread peak (at the DRAM rate for one
      // row), whole passes when streaming.
      struct Case {
        std::vector<std::unique_ptr<a_type<O>[], void (*)(void*)>> as;
        std::vector<std::unique_ptr<typename O::c_type[], void (*)(void*)>> cs;
        long calls = 0;
        double ops_per_call = 0;
      };
      const auto make_case = [&](index_t m, bool stream) {
        Case cs;
        const auto c_bytes = static_cast<std::size_t>((m + 15) / 16 * 16 * panel_cols * 4);
        for (int t = 0; t < nt; ++t) {
          cs.as.emplace_back(static_cast<a_type<O>*>(std::aligned_alloc(64, static_cast<std::size_t>((m + 16) * lda_bytes))),
                             &std::free);
          std::memset(cs.as.back().get(), 1, static_cast<std::size_t>((m + 16) * lda_bytes));
          cs.cs.emplace_back(static_cast<typename O::c_type*>(std::aligned_alloc(64, c_bytes)), &std::free);
        }
        cs.ops_per_call = 2.0 * static_cast<double>(m) * static_cast<double>(K) * panel_cols;
        long calls = m == 1 ? static_cast<long>(seconds * lim.dram_gbs * 1e9 / nt / static_cast<double>(panel_bytes))
                            : static_cast<long>(seconds * 0.4 * peak_now / nt * 1e9 / cs.ops_per_call);
        calls = std::max(16L, calls);
        if (stream) calls = std::max<long>(calls / static_cast<long>(per_thread), 1) * static_cast<long>(per_thread);
        cs.calls = calls;
        return cs;
      };
      // seconds for every thread to make the case's calls of `kernel`, each with the panel it
      // multiplies next
      const auto time_kernel = [&](Case& cs, auto kernel, index_t m, bool stream) {
        return bench::run_together(nt, [&](int t) {
          const auto* base = panels.get() + static_cast<std::size_t>(t) * per_thread * static_cast<std::size_t>(panel_elems);
          const auto pi = [&](long j) {
            return stream ? static_cast<std::size_t>(j) % per_thread : static_cast<std::size_t>(j & 1);
          };
          for (long i = 0; i < cs.calls; ++i)
            kernel(cs.as[static_cast<std::size_t>(t)].get(), lda, m, nkb, base + pi(i) * static_cast<std::size_t>(panel_elems),
                   base + pi(i + 1) * static_cast<std::size_t>(panel_elems), cs.cs[static_cast<std::size_t>(t)].get());
        });
      };
      const auto line = [&](const char* what, index_t m, bool stream) {
        std::printf("  %s %-6s K=%4ld m=%3ld thr=%2d %-13s", type, stream ? "stream" : "hot", static_cast<long>(K),
                    static_cast<long>(m), nt, what);
      };
      // the variants alternate within each of four rounds; each keeps its best time
      const auto measure = [&](const auto& vs, index_t m, bool stream) {
        Case cs = make_case(m, stream);
        std::vector<double> best_s(vs.size(), 1e30);
        for (int round = 0; round < 4; ++round)
          for (std::size_t vi = 0; vi < vs.size(); ++vi)
            best_s[vi] = std::min(best_s[vi], time_kernel(cs, vs[vi].second, m, stream));
        for (std::size_t vi = 0; vi < vs.size(); ++vi) {
          const double best = best_s[vi];
          const double gops = cs.ops_per_call * static_cast<double>(cs.calls) * nt / best / 1e9;
          const double peak = Int8 ? lim.amx_int8_gops : lim.amx_bf16_gflops;
          const double gbs = static_cast<double>(panel_bytes) * static_cast<double>(cs.calls) * nt / best / 1e9;
          line(vs[vi].first, m, stream);
          std::printf(" %9.0f G/s %5.1f %%AMX   B %6.1f GB/s %5.1f %%DRAM\n", gops, 100.0 * gops / peak, gbs,
                      100.0 * gbs / lim.dram_gbs);
          std::fflush(stdout);
        }
      };
      // --pair: rounds of A B B A; per round the rate of B over A (the two timings of each summed),
      // so that a slow state of the machine meets both; the median and quartiles over the rounds
      const auto measure_pair = [&](const auto& a, const auto& b, index_t m, bool stream) {
        Case cs = make_case(m, stream);
        std::vector<double> ratio, rate_a;
        for (int round = 0; round < pair_rounds; ++round) {
          const double a1 = time_kernel(cs, a.second, m, stream), b1 = time_kernel(cs, b.second, m, stream);
          const double b2 = time_kernel(cs, b.second, m, stream), a2 = time_kernel(cs, a.second, m, stream);
          ratio.push_back((a1 + a2) / (b1 + b2));
          rate_a.push_back(2 * cs.ops_per_call * static_cast<double>(cs.calls) * nt / (a1 + a2) / 1e9);
        }
        const auto q = [&](double f) { return bench::quantile(ratio, f); };
        const std::string what = std::string(b.first) + "/" + a.first;
        line(what.c_str(), m, stream);
        std::printf(" rate ratio median %.3f, quartiles %.3f-%.3f, range %.3f-%.3f (%d ABBA rounds; %s median %.0f G/s)\n",
                    q(0.5), q(0.25), q(0.75), q(0.0), q(1.0), pair_rounds, a.first, bench::quantile(rate_a, 0.5));
        std::fflush(stdout);
      };
      if (!pair.first.empty()) {
        const auto vs = variants<Int8>();
        const auto find = [&](const std::string& name) {  // (main checked the names)
          return *std::find_if(vs.begin(), vs.end(), [&](const auto& v) { return name == v.first; });
        };
        check(vs, {16, 48, 128});
        for (const index_t m : {index_t{32}, index_t{128}}) measure_pair(find(pair.first), find(pair.second), m, true);
        continue;
      }
      check(variants<Int8>(), {16, 48, 128});
      for (const index_t m : {index_t{32}, index_t{128}})
        for (const bool stream : {false, true}) measure(variants<Int8>(), m, stream);
      if constexpr (!Int8) {
        check(decode_variants(), {1});
        measure(decode_variants(), 1, true);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<long> threads = {1, 16};
  double seconds = 0.1;
  bool peaks_only = false, formats_only = false;
  std::string threshold_format, decomp_format;
  index_t threshold_k = 2048;
  std::vector<std::string> pair_names;
  int rounds = 15;
  // --threshold's formats, each with its measurement: the choices are this list
  const std::vector<std::pair<std::string, std::function<void()>>> thresholds{
      {"mxfp4", [&] { threshold<mxfp4_format>("mxfp4", threads, threshold_k, rounds); }},
      {"nvfp4", [&] { threshold<nvfp4_format>("nvfp4", threads, threshold_k, rounds); }},
      {"nvfp4_w4a4", [&] { threshold<nvfp4_format>("w4a4", threads, threshold_k, rounds, true); }},
      {"fp8", [&] { threshold<fp8_format>("fp8", threads, threshold_k, rounds); }},
      {"fp8_w8a8", [&] { threshold<fp8_format>("w8a8", threads, threshold_k, rounds, true); }},
      {"mxfp4_bf16", [&] { threshold<mxfp4_format>("mx/bf", threads, threshold_k, rounds, false, true); }},
      {"nvfp4_bf16", [&] { threshold<nvfp4_format>("nv/bf", threads, threshold_k, rounds, false, true); }},
      {"fp8_bf16", [&] { threshold<fp8_format>("f8/bf", threads, threshold_k, rounds, false, true); }},
  };
  const std::vector<std::pair<std::string, std::function<void()>>> decompositions{
      {"mxfp4", [&] { decomposition<mxfp4_format>("mxfp4", threads, threshold_k, rounds); }},
      {"nvfp4", [&] { decomposition<nvfp4_format>("nvfp4", threads, threshold_k, rounds); }},
  };
  const auto names_of = [](const auto& list) {
    std::vector<std::string> n;
    for (const auto& e : list) n.emplace_back(e.first);
    return n;
  };

  CLI::App app("bench_amx: the AMX row-block kernels of kernel::tiled_amx alone", "bench_amx");
  programs::set_up(app, POLYMOE_VERSION_STRING, POLYMOE_GIT_COMMIT);
  app.add_option("--threads", threads, "thread counts (default 1,16)")
      ->delimiter(',')
      ->type_name("LIST")
      ->check(CLI::Range(1L, 1L << 16));
  app.add_option("--seconds", seconds, "time per variant and round (default 0.1)")
      ->type_name("S")
      ->check(CLI::PositiveNumber);
  app.add_flag("--peaks", peaks_only, "only the tile peaks: limits.hpp's against the rate held for 0.3 s");
  app.add_flag("--formats", formats_only, "the library's loop on bf16 and int8 operands of the same bytes");
  app.add_option("--pair", pair_names, "time only variants A and B, streamed, in rounds of A B B A")
      ->delimiter(',')
      ->expected(2)
      ->type_name("A,B")
      ->check(programs::choice(names_of(variants<false>())));  // the same names for int8
  app.add_option("--rounds", rounds, "rounds (default 15)")->type_name("N")->check(CLI::Range(1, 1 << 20));
  app.add_option("--threshold", threshold_format,
                 "the two ways kernel::tiled_amx multiplies a row block by a quantized panel,\n"
                 "for row blocks of 1 to 16 rows")
      ->type_name("FORMAT")
      ->check(programs::choice(names_of(thresholds)));
  app.add_option("--decomp", decomp_format, "the decomposition of a quantized panel's product")
      ->type_name("FORMAT")
      ->check(programs::choice(names_of(decompositions)));
  app.add_option("--k", threshold_k, "K of --threshold and --decomp (default 2048)")
      ->type_name("K")
      ->check(CLI::Range(index_t{1}, index_t{1} << 30));
  app.footer("The comment at the top of bench/bench_amx.cpp says what each mode measures.");
  if (const auto status = programs::parse(app, argc, argv, 2)) return *status;
  std::pair<std::string, std::string> pair;
  if (pair_names.size() == 2) pair = {pair_names[0], pair_names[1]};
  if (const char* why = amx_unavailable_reason()) {
    std::printf("bench_amx: AMX cannot run here: %s\n", why);
    return 0;
  }
  if (peaks_only) {
    peaks(threads);
    return 0;
  }
  if (formats_only) {
    formats(threads, rounds);
    return 0;
  }
  for (const auto& [name, measure] : decompositions)
    if (name == decomp_format) measure();
  if (!decomp_format.empty()) return 0;
  for (const auto& [name, measure] : thresholds)
    if (name == threshold_format) measure();
  if (!threshold_format.empty()) return 0;
  std::vector<bench::Limits> limits;
  for (const long t : threads) {
    bench::Limits l;
    l.threads = static_cast<int>(t);
    l.dram();
    l.amx();
    limits.push_back(l);
  }
  run<false>(threads, seconds, limits, pair, rounds);
  run<true>(threads, seconds, limits, pair, rounds);
  for (const auto& l : limits)
    std::printf("limits, best of the run, %d thread(s): AMX %.0f bf16 / %.0f int8, DRAM %.1f GB/s\n", l.threads,
                l.amx_bf16_gflops, l.amx_int8_gops, l.dram_gbs);
  return 0;
}

#endif
