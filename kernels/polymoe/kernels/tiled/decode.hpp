// The decode path: one or two rows against a panel (few tokens per expert, as in decode, where
// every weight is used once or twice and the time is the time to stream the panel from memory).
//
// A one-row tile has only four accumulators, too few to hide the FMA latency, so this kernel
// keeps two sets (even and odd k) and adds them at the end; it also prefetches the panel a few
// rows ahead. The sum order is fixed by the row count alone, so results stay independent of the
// thread count.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_DECODE) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_DECODE
#undef POLYMOE_TILED_GUARD_DECODE
#else
#define POLYMOE_TILED_GUARD_DECODE
#endif
#include <polymoe/kernels/tiled/microkernel.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

/// Rows per tile up to which run_tiles takes the decode path.
inline constexpr int decode_rows = 2;

#if POLYMOE_TILED_AVX512

/// C[M][64] = sum over k in [0, K) of a[r][k] · panel[k][:], for M = 1 or 2.
template <int M, class W>
inline void decode_tile(const float* const* a, index_t K, const W* panel, float* c) noexcept {
  static_assert(M >= 1 && M <= decode_rows);
  // Prefetch distance in k-rows: 4 KiB ahead of the loads (the distance bench_tiled's DRAM read
  // test uses; 1 KiB and 4 KiB measured alike on the noisy development machine).
  constexpr index_t ahead = 4096 / (panel_cols * static_cast<index_t>(sizeof(W)));
  __m512 even[M][4], odd[M][4];
  for (int r = 0; r < M; ++r)
    for (int v = 0; v < 4; ++v) even[r][v] = odd[r][v] = _mm512_setzero_ps();
  const W* wk = panel;
  index_t k = 0;
  for (; k + 1 < K; k += 2, wk += 2 * panel_cols) {
    _mm_prefetch(reinterpret_cast<const char*>(wk + ahead * panel_cols), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(wk + ahead * panel_cols) + 64, _MM_HINT_T0);
    if constexpr (sizeof(W) == 4) {
      _mm_prefetch(reinterpret_cast<const char*>(wk + ahead * panel_cols) + 128, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(wk + ahead * panel_cols) + 192, _MM_HINT_T0);
    }
    __m512 w0, w1, w2, w3, u0, u1, u2, u3;
    load_panel_row(wk, w0, w1, w2, w3);
    load_panel_row(wk + panel_cols, u0, u1, u2, u3);
    for (int r = 0; r < M; ++r) {
      const __m512 x = _mm512_set1_ps(a[r][k]);
      const __m512 y = _mm512_set1_ps(a[r][k + 1]);
      even[r][0] = _mm512_fmadd_ps(x, w0, even[r][0]);
      even[r][1] = _mm512_fmadd_ps(x, w1, even[r][1]);
      even[r][2] = _mm512_fmadd_ps(x, w2, even[r][2]);
      even[r][3] = _mm512_fmadd_ps(x, w3, even[r][3]);
      odd[r][0] = _mm512_fmadd_ps(y, u0, odd[r][0]);
      odd[r][1] = _mm512_fmadd_ps(y, u1, odd[r][1]);
      odd[r][2] = _mm512_fmadd_ps(y, u2, odd[r][2]);
      odd[r][3] = _mm512_fmadd_ps(y, u3, odd[r][3]);
    }
  }
  if (k < K) {
    __m512 w0, w1, w2, w3;
    load_panel_row(wk, w0, w1, w2, w3);
    for (int r = 0; r < M; ++r) {
      const __m512 x = _mm512_set1_ps(a[r][k]);
      even[r][0] = _mm512_fmadd_ps(x, w0, even[r][0]);
      even[r][1] = _mm512_fmadd_ps(x, w1, even[r][1]);
      even[r][2] = _mm512_fmadd_ps(x, w2, even[r][2]);
      even[r][3] = _mm512_fmadd_ps(x, w3, even[r][3]);
    }
  }
  for (int r = 0; r < M; ++r)
    for (int v = 0; v < 4; ++v)
      _mm512_store_ps(c + r * panel_cols + 16 * v, _mm512_add_ps(even[r][v], odd[r][v]));
}

#else  // portable: the prefill tile is already as good as a portable loop gets

template <int M, class W>
inline void decode_tile(const float* const* a, index_t K, const W* panel, float* c) noexcept {
  tile<M>(a, 0, K, panel, c, false);
}

#endif

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_DECODE
