#pragma once
// The machine's limits, measured in-run by the benchmarks (bench_tiled, polymoe_bench):
//   DRAM read bandwidth: every thread sums its own contiguous part of a buffer much larger than the
//     LLC with AVX-512 loads and a software prefetch; best of 5 passes;
//   fp32 FMA peak: 16 register-resident FMA chains per thread; best of 5 passes;
//   int8 VNNI peak: 16 register-resident vpdpbusd chains per thread (64 u8 x s8 products and adds
//     each, counted as 128 ops); best of 5; reported as 0 (n/a) when built without __AVX512VNNI__;
//   bf16 dot-product peak: 16 register-resident vdpbf16ps chains per thread (32 bf16 products and
//     adds each, counted as 64 flops); best of 5; 0 (n/a) when built without __AVX512BF16__;
//   AMX peaks: four register-resident tile accumulators per thread, tdpbf16ps (16 x 16 x 32
//     products, 16384 flops) and tdpbusd (16 x 16 x 64 products, 32768 ops); best of 5; 0 (n/a)
//     where the tiles cannot run (kernels::tiled::amx_unavailable_reason). On the device machine
//     the per-core tile rate is not steady (cores shared with other work run tdpbf16ps at half
//     rate or less), so the value printed with each measurement is worth reading, not only the best.
// `Limits` re-measures on request and keeps the best value seen, so a limit measured while the
// machine was busy cannot flatter a ratio.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <polymoe/kernels/tiled/amx.hpp>
#include <polymoe/kernels/tiled/buffer.hpp>

namespace polymoe::bench {

using clock_type = std::chrono::steady_clock;

inline double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

#if defined(__AVX512F__)
// Horizontal sum (GCC 12 warns inside _mm512_reduce_add_ps).
inline float hsum(__m512 v) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  float s = 0;
  for (float x : t) s += x;
  return s;
}
#endif

/// "1,16,64" -> {1, 16, 64} (std::stol: a word that is not a number throws).
inline std::vector<long> comma_list(const std::string& s) {
  std::vector<long> v;
  for (std::size_t p = 0; p < s.size();) {
    const std::size_t q = s.find(',', p);
    v.push_back(std::stol(s.substr(p, q - p)));
    p = q == std::string::npos ? s.size() : q + 1;
  }
  return v;
}

/// The f-quantile of v (0: the least, 0.5: the median, 1: the greatest), nearest rank: the value at
/// index round(f · (size - 1)) of v sorted. v must not be empty.
inline double quantile(std::vector<double> v, double f) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(f * static_cast<double>(v.size() - 1) + 0.5)];
}

/// Last-level cache size (the library's reading of it: kernels::tiled::last_level_cache_bytes).
inline std::size_t llc_bytes() { return polymoe::kernels::tiled::last_level_cache_bytes(); }

/// Available physical memory in bytes (sysconf), 0 when unknown.
inline std::size_t available_memory_bytes() {
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

/// Runs body(t) on `threads` OS threads that start together; returns the seconds from the start
/// signal until the last one finishes.
template <class Body>
double run_together(int threads, Body body) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      body(t);
    });
  while (ready.load() < threads) {
  }
  const auto t0 = clock_type::now();
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  return seconds_since(t0);
}

/// DRAM read bandwidth in GB/s over a buffer of `bytes`.
inline double dram_read_gbs(std::size_t bytes, int threads) {
  const std::size_t per = bytes / sizeof(float) / static_cast<std::size_t>(threads) / 1024 * 1024;
  std::unique_ptr<float[]> buf(new float[per * static_cast<std::size_t>(threads)]);
  run_together(threads, [&](int t) { std::fill_n(buf.get() + per * static_cast<std::size_t>(t), per, 1.0f); });
  std::vector<double> sink(static_cast<std::size_t>(threads));
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t = run_together(threads, [&](int id) {
      const float* p = buf.get() + per * static_cast<std::size_t>(id);
#if defined(__AVX512F__)
      __m512 a[8];
      for (auto& v : a) v = _mm512_setzero_ps();
      for (std::size_t i = 0; i < per; i += 128) {
        _mm_prefetch(reinterpret_cast<const char*>(p + i + 1024), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(p + i + 1024 + 64), _MM_HINT_T0);
        for (int j = 0; j < 8; ++j) a[j] = _mm512_add_ps(a[j], _mm512_loadu_ps(p + i + 16 * j));
      }
      for (int j = 1; j < 8; ++j) a[0] = _mm512_add_ps(a[0], a[j]);
      sink[static_cast<std::size_t>(id)] = hsum(a[0]);
#else
      float s = 0;
      for (std::size_t i = 0; i < per; ++i) s += p[i];
      sink[static_cast<std::size_t>(id)] = s;
#endif
    });
    best = std::max(best, static_cast<double>(per * sizeof(float)) * threads / t / 1e9);
  }
  if (sink[0] == 42) std::printf(" ");
  return best;
}

/// Best of 5 passes of `chains(id, iters)` on every thread at once, in G operations per second:
/// each pass runs `iters` steps of 16 register-resident dependency chains per thread, each step of
/// a chain `ops_per_step` operations, and returns a value kept so the chains are not optimised away.
template <class Chains>
inline double chain_peak(int threads, double ops_per_step, Chains chains) {
  const long iters = 4'000'000;
  std::vector<double> sink(static_cast<std::size_t>(threads));
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t = run_together(threads, [&](int id) { sink[static_cast<std::size_t>(id)] = chains(id, iters); });
    best = std::max(best, ops_per_step * 16 * static_cast<double>(iters) * threads / t / 1e9);
  }
  if (sink[0] == 42) std::printf(" ");
  return best;
}

/// fp32 FMA peak in GFLOP/s (an FMA counts 2 flops).
inline double fma_peak_gflops(int threads) {
#if defined(__AVX512F__)
  return chain_peak(threads, 2.0 * 16, [](int id, long iters) {
    __m512 a[16];
    for (int j = 0; j < 16; ++j) a[j] = _mm512_set1_ps(static_cast<float>(j + id));
    const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
    for (long i = 0; i < iters; ++i)
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) a[j] = _mm512_fmadd_ps(a[j], m, c);
    __m512 s = a[0];
    for (int j = 1; j < 16; ++j) s = _mm512_add_ps(s, a[j]);
    return static_cast<double>(hsum(s));
  });
#else
  return chain_peak(threads, 2.0 * 8, [](int id, long iters) {  // 16 x 8 scalar chains
    float a[16 * 8];
    for (int j = 0; j < 16 * 8; ++j) a[j] = static_cast<float>(j + id);
    for (long i = 0; i < iters; ++i)
      for (int j = 0; j < 16 * 8; ++j) a[j] = a[j] * 0.9999999f + 1e-7f;
    return static_cast<double>(a[0]);
  });
#endif
}

/// int8 VNNI peak in GOP/s (vpdpbusd: 64 multiplies and 64 adds each); 0 without __AVX512VNNI__.
inline double vnni_peak_gops([[maybe_unused]] int threads) {
#if defined(__AVX512VNNI__)
  return chain_peak(threads, 2.0 * 64, [](int id, long iters) {
    __m512i a[16];
    for (int j = 0; j < 16; ++j) a[j] = _mm512_set1_epi32(j + id);
    const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
    for (long i = 0; i < iters; ++i)
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) a[j] = _mm512_dpbusd_epi32(a[j], u, s);
    __m512i r = a[0];
    for (int j = 1; j < 16; ++j) r = _mm512_add_epi32(r, a[j]);
    alignas(64) int v[16];
    _mm512_store_si512(v, r);
    return static_cast<double>(v[0]);
  });
#else
  return 0.0;
#endif
}

/// bf16 dot-product peak in GFLOP/s (vdpbf16ps: 32 products and 32 adds each); 0 without
/// __AVX512BF16__.
inline double bf16_dot_peak_gflops([[maybe_unused]] int threads) {
#if defined(__AVX512BF16__)
  return chain_peak(threads, 2.0 * 32, [](int id, long iters) {
    __m512 a[16];
    for (int j = 0; j < 16; ++j) a[j] = _mm512_set1_ps(static_cast<float>(j + id));
    const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(-1e-3f));
    const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
    for (long i = 0; i < iters; ++i)
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) a[j] = _mm512_dpbf16_ps(a[j], x, y);
    __m512 r = a[0];
    for (int j = 1; j < 16; ++j) r = _mm512_add_ps(r, a[j]);
    return static_cast<double>(hsum(r));
  });
#else
  return 0.0;
#endif
}

#if POLYMOE_TILED_AMX_CODE
/// `iters` x 4 tile products on four accumulators (tiles 0-3); the operand tiles 4-6 are zero, or
/// loaded from `operands` (3 KiB, 64-byte rows) where it is given.
template <bool Int8>
__attribute__((target("amx-tile,amx-bf16,amx-int8"))) inline float amx_products(long iters,
                                                                                const void* operands = nullptr) noexcept {
  kernels::tiled::amx::configure();
  // (the tile intrinsics are asm statements, not expressions: one per statement)
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  if (operands) {
    const char* o = static_cast<const char*>(operands);
    _tile_loadd(4, o, 64);
    _tile_loadd(5, o + 1024, 64);
    _tile_loadd(6, o + 2048, 64);
  } else {
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
  }
  for (long i = 0; i < iters; ++i) {
    if constexpr (Int8) {
      _tile_dpbusd(0, 4, 5);
      _tile_dpbusd(1, 4, 6);
      _tile_dpbusd(2, 4, 5);
      _tile_dpbusd(3, 4, 6);
    } else {
      _tile_dpbf16ps(0, 4, 5);
      _tile_dpbf16ps(1, 4, 6);
      _tile_dpbf16ps(2, 4, 5);
      _tile_dpbf16ps(3, 4, 6);
    }
  }
  alignas(64) float c[256];
  _tile_stored(0, c, 64);
  _tile_release();
  return c[0];
}
#endif

/// AMX peak in GFLOP/s (bf16) or GOP/s (int8), 0 where the tiles cannot run.
inline double amx_peak([[maybe_unused]] int threads, [[maybe_unused]] bool int8) {
#if POLYMOE_TILED_AMX_CODE
  if (kernels::tiled::amx_unavailable_reason() != nullptr) return 0.0;
  const long iters = 100'000;
  std::vector<float> sink(static_cast<std::size_t>(threads));
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t = run_together(threads, [&](int id) {
      sink[static_cast<std::size_t>(id)] = int8 ? amx_products<true>(iters) : amx_products<false>(iters);
    });
    const double per_product = int8 ? 2.0 * 16 * 16 * 64 : 2.0 * 16 * 16 * 32;
    best = std::max(best, 4.0 * per_product * static_cast<double>(iters) * threads / t / 1e9);
  }
  if (sink[0] == 42) std::printf(" ");
  return best;
#else
  return 0.0;
#endif
}

/// The limits for one thread count; each call re-measures and keeps the best value seen.
struct Limits {
  int threads = 1;
  std::size_t dram_bytes = std::size_t{1} << 30;
  double dram_gbs = 0, peak_gflops = 0, vnni_gops = 0, bf16_dot_gflops = 0, amx_bf16_gflops = 0, amx_int8_gops = 0;
  double gpu_copy_gbs = 0, gpu_bf16_gflops = 0;  // the GPU's, where one is timed (polymoe_bench_cuda.cpp)
  double dram() { return dram_gbs = std::max(dram_gbs, dram_read_gbs(dram_bytes, threads)); }
  double peak() { return peak_gflops = std::max(peak_gflops, fma_peak_gflops(threads)); }
  double vnni() { return vnni_gops = std::max(vnni_gops, vnni_peak_gops(threads)); }
  double bf16_dot() { return bf16_dot_gflops = std::max(bf16_dot_gflops, bf16_dot_peak_gflops(threads)); }
  /// Both AMX peaks; returns this measurement's bf16 value (before the best is kept).
  double amx() {
    const double now = amx_peak(threads, false);
    amx_bf16_gflops = std::max(amx_bf16_gflops, now);
    amx_int8_gops = std::max(amx_int8_gops, amx_peak(threads, true));
    return now;
  }
};

}  // namespace polymoe::bench
