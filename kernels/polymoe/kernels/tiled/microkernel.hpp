// The tiled kernel's register-blocked micro-kernel: C[MR][64] (+)= A[MR][k0..k1) · panel[k0..k1)[64].
//
// MR rows (up to max_tile_rows = 6) by 64 columns (4 AVX-512 vectors): 24 accumulators, 4 weight
// vectors and one broadcast stay in the 32 vector registers. Each row's sum runs over k in order,
// one fused multiply-add per k, so a result depends only on its row and its panel, never on how
// the work was split between threads.
//
// Weights are fp32 or bf16 bits (see prepack.hpp for the layout); bf16 is widened to fp32 in
// registers (shift / and). bf16 blocks of prefill size run tall_tile instead: up to 12 rows by
// 32 columns, which widens half as often per FMA (see there). The AVX-512 version is compiled for the levels with
// AVX-512 (level.hpp); the portable level's loop computes the same sums.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_MICROKERNEL) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_MICROKERNEL
#undef POLYMOE_TILED_GUARD_MICROKERNEL
#else
#define POLYMOE_TILED_GUARD_MICROKERNEL
#endif
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include <polymoe/core/types.hpp>
#include <polymoe/kernels/tiled/prepack.hpp>

// POLYMOE_TILED_AVX512, POLYMOE_TILED_DPBF16 (bf16 pairs on vdpbf16ps) and the others: level.hpp and
// level_macros.hpp.

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

inline constexpr int max_tile_rows = 6;

/// f.template operator()<M>() for the run-time row count m in [1, Max]: how a row group picks the
/// instance of its micro-kernel.
template <int Max, class F>
inline void with_rows(int m, F&& f) {
  [&]<int... M>(std::integer_sequence<int, M...>) {
    (void)((m == M + 1 ? (f.template operator()<M + 1>(), true) : false) || ...);
  }(std::make_integer_sequence<int, Max>{});
}
/// Rows of a tall tile (AVX-512 builds): bf16 panels run a block in row groups of up to 12 rows
/// against half a panel at a time (32 columns: one 64-byte line of each k-row, two vectors).
inline constexpr int max_tall_rows = 12;

#if POLYMOE_TILED_AVX512

/// The cache level that a software prefetch fills (`none`: no prefetch instruction at all). The
/// library runs t0; the others are measurement variants of the AMX kernels' weight stream (amx.hpp).
enum class Pf { t0, t2, nta, none };

/// Fetches the line at p with hint P.
template <Pf P = Pf::t0>
inline void prefetch_line(const char* p) noexcept {
  if constexpr (P == Pf::t0)
    _mm_prefetch(p, _MM_HINT_T0);
  else if constexpr (P == Pf::t2)
    _mm_prefetch(p, _MM_HINT_T2);
  else if constexpr (P == Pf::nta)
    _mm_prefetch(p, _MM_HINT_NTA);
  else
    (void)p;
}

/// Fetches bytes [from, to) after p (into L1 with the default hint), one 64-byte line at a time.
template <Pf P = Pf::t0>
inline void prefetch_lines(const void* p, index_t from, index_t to) noexcept {
  if constexpr (P != Pf::none) {
    const char* c = static_cast<const char*>(p);
    for (index_t b = from; b < to; b += 64) prefetch_line<P>(c + b);
  }
}

/// Widens one k-row of a panel into four fp32 vectors.
template <class W>
inline void load_panel_row(const W* wk, __m512& w0, __m512& w1, __m512& w2, __m512& w3) noexcept {
  if constexpr (std::is_same_v<W, std::uint16_t>) {
    const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    const __m512i l0 = _mm512_load_si512(wk);
    const __m512i l1 = _mm512_load_si512(wk + 32);
    w0 = _mm512_castsi512_ps(_mm512_slli_epi32(l0, 16));
    w1 = _mm512_castsi512_ps(_mm512_and_si512(l0, hi));
    w2 = _mm512_castsi512_ps(_mm512_slli_epi32(l1, 16));
    w3 = _mm512_castsi512_ps(_mm512_and_si512(l1, hi));
  } else {
    w0 = _mm512_load_ps(wk);
    w1 = _mm512_load_ps(wk + 16);
    w2 = _mm512_load_ps(wk + 32);
    w3 = _mm512_load_ps(wk + 48);
  }
}

/// C[MR][64] = (accumulate ? C : 0) + sum over k in [k0, k1) of a[r][k] · panel[k][:]. When
/// `prefetch` is set, also prefetches `prefetch_bytes` from prefetch + (k − k0)·prefetch_bytes per k
/// (the next slab of the panel).
template <int MR, class W>
inline void tile(const float* const* a, index_t k0, index_t k1, const W* panel, float* c, bool accumulate,
                 const char* prefetch = nullptr, index_t prefetch_bytes = 0) noexcept {
  __m512 acc[MR][4];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) acc[r][v] = accumulate ? _mm512_load_ps(c + r * panel_cols + 16 * v) : _mm512_setzero_ps();
  const float* rows[MR];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) rows[r] = a[r];
  const W* wk = panel + k0 * panel_cols;
  for (index_t k = k0; k < k1; ++k, wk += panel_cols) {
    if (prefetch) {
      prefetch_lines(prefetch + (k - k0) * prefetch_bytes, 0, prefetch_bytes);
    }
    __m512 w0, w1, w2, w3;
    load_panel_row(wk, w0, w1, w2, w3);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m512 x = _mm512_set1_ps(rows[r][k]);
      acc[r][0] = _mm512_fmadd_ps(x, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, w1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(x, w2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(x, w3, acc[r][3]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm512_store_ps(c + r * panel_cols + 16 * v, acc[r][v]);
}

/// C[MR][32] (+)= A[MR][k0..k1) · the half panel whose k-row lines start at `half` (panel + 32·h;
/// C rows are panel_cols apart, as in tile). 24 accumulators; per k one line, two widening
/// operations and 2·MR FMAs. The widening runs on the vector ports that also run the FMAs (on
/// Intel cores): the 6 x 64 tile spends 4 of every 28 such slots on it, this one 2 of 26 at 12
/// rows. Each result is the same k-ordered chain of FMAs as tile's, bit for bit.
///
/// Prefetch: every `pf_every`-th k-row from `pf_first` on, this pass fetches the two lines of
/// that k-row of the next slab at `prefetch` (the block's passes share the next slab between
/// them, a line pair every few k rather than all of it from one pass).
template <int MR>
inline void tall_tile(const float* const* a, index_t k0, index_t k1, const std::uint16_t* half, float* c,
                      bool accumulate, const char* prefetch, index_t pf_first, index_t pf_every) noexcept {
  __m512 acc[MR][2];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < 2; ++v)
      acc[r][v] = accumulate ? _mm512_load_ps(c + r * panel_cols + 16 * v) : _mm512_setzero_ps();
  const float* rows[MR];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) rows[r] = a[r];
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const std::uint16_t* wk = half + k0 * panel_cols;
  index_t next_pf = prefetch ? k0 + pf_first : k1;
  for (index_t k = k0; k < k1; ++k, wk += panel_cols) {
    if (k == next_pf) {
      prefetch_lines(prefetch + (k - k0) * panel_cols * 2, 0, 128);
      next_pf += pf_every;
    }
    const __m512i l = _mm512_load_si512(wk);
    const __m512 w0 = _mm512_castsi512_ps(_mm512_slli_epi32(l, 16));
    const __m512 w1 = _mm512_castsi512_ps(_mm512_and_si512(l, hi));
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      const __m512 x = _mm512_set1_ps(rows[r][k]);
      acc[r][0] = _mm512_fmadd_ps(x, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, w1, acc[r][1]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < 2; ++v) _mm512_store_ps(c + r * panel_cols + 16 * v, acc[r][v]);
}

/// tall_tile<m> for a run-time m in [1, max_tall_rows].
inline void tall_rows(int m, const float* const* a, index_t k0, index_t k1, const std::uint16_t* half, float* c,
                      bool accumulate, const char* prefetch, index_t pf_first, index_t pf_every) noexcept {
  with_rows<max_tall_rows>(
      m, [&]<int M>() { tall_tile<M>(a, k0, k1, half, c, accumulate, prefetch, pf_first, pf_every); });
}

#else  // portable

/// One k-row of a panel as 64 fp32 values in column order.
template <class W>
inline void load_panel_row(const W* wk, float* w) noexcept {
  if constexpr (std::is_same_v<W, std::uint16_t>) {
    for (index_t p = 0; p < panel_cols; ++p) {
      const std::uint32_t bits = static_cast<std::uint32_t>(wk[storage_slot<W>(p)]) << 16;
      std::memcpy(&w[p], &bits, sizeof(float));
    }
  } else {
    for (index_t p = 0; p < panel_cols; ++p) w[p] = wk[p];
  }
}

/// C[MR][64] = (accumulate ? C : 0) + sum over k in [k0, k1) of a[r][k] · panel[k][:].
template <int MR, class W>
inline void tile(const float* const* a, index_t k0, index_t k1, const W* panel, float* c, bool accumulate,
                 const char* = nullptr, index_t = 0) noexcept {
  if (!accumulate)
    for (index_t i = 0; i < MR * panel_cols; ++i) c[i] = 0.0f;
  float w[panel_cols];
  for (index_t k = k0; k < k1; ++k) {
    load_panel_row(panel + k * panel_cols, w);
    for (int r = 0; r < MR; ++r) {
      const float x = a[r][k];
      float* cr = c + r * panel_cols;
      for (index_t p = 0; p < panel_cols; ++p) cr[p] += x * w[p];
    }
  }
}

#endif

/// tile<m> for a run-time m in [1, max_tile_rows].
template <class W>
inline void tile_rows(int m, const float* const* a, index_t k0, index_t k1, const W* panel, float* c, bool accumulate,
                      const char* prefetch, index_t prefetch_bytes) noexcept {
  with_rows<max_tile_rows>(m, [&]<int M>() { tile<M>(a, k0, k1, panel, c, accumulate, prefetch, prefetch_bytes); });
}

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_MICROKERNEL
