// A row block times one panel: c[m][64] = sum over k of row(i)[k] · W[k][:] for the float, bf16
// and quantized panels (the micro-kernels of microkernel.hpp over slabs of the panel), and the
// tall-tile variant for bf16 on Intel cores.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_PANEL_PRODUCTS) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_PANEL_PRODUCTS
#undef POLYMOE_TILED_GUARD_PANEL_PRODUCTS
#else
#define POLYMOE_TILED_GUARD_PANEL_PRODUCTS
#endif
#include <algorithm>
#include <cstdint>

#include <polymoe/kernels/tiled/decode.hpp>
#include <polymoe/kernels/tiled/microkernel.hpp>
#include <polymoe/kernels/tiled/prepack.hpp>
#include <polymoe/kernels/tiled/qpanel.hpp>
#include <polymoe/kernels/tiled/workspace.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

/// Whether bf16 blocks of more than max_tile_rows rows run tall tiles (microkernel.hpp), a
/// compile-time choice by the target: on Intel cores the widening shares the FMA ports, and the
/// tall tile halves it per FMA (16-core device machine, one thread, Qwen3-30B-A3B T=512: 76 % of
/// the FMA peak against 50 %); on AMD Zen 4 it runs on ports of its own, and the 6 x 64 tile,
/// with half the broadcasts, was faster (one thread, T=2048: 106-109 against 98 GFLOP/s;
/// docs/decisions.md#tall-tiles).
/// -DPOLYMOE_TILED_TALL=0/1 overrides (level_macros.hpp defines it).

namespace detail {

#if POLYMOE_TILED_AVX512
/// block_times_panel for bf16 blocks of more than max_tile_rows rows: row groups of up to
/// max_tall_rows rows, cut evenly, each against both halves of a slab in turn; the 2·groups
/// passes over a slab share the prefetch of the next one.
template <class RowOf>
inline void tall_block_times_panel(index_t m, RowOf row, index_t K, const std::uint16_t* panel, float* c) {
  constexpr index_t kb = k_block<std::uint16_t>, half = panel_cols / 2;
  const index_t groups = (m + max_tall_rows - 1) / max_tall_rows, passes = 2 * groups;
  const float* rows[max_tall_rows];
  for (index_t k0 = 0; k0 < K; k0 += kb) {
    const index_t k1 = std::min(K, k0 + kb);
    const char* next = reinterpret_cast<const char*>(panel + k1 * panel_cols);  // past the end: the next panel
    for (index_t g = 0; g < groups; ++g) {
      const index_t r0 = g * m / groups, n = (g + 1) * m / groups - r0;
      for (index_t i = 0; i < n; ++i) rows[i] = row(r0 + i);
      for (index_t h = 0; h < 2; ++h)
        tall_rows(static_cast<int>(n), rows, k0, k1, panel + h * half, c + r0 * panel_cols + h * half, k0 > 0, next,
                  2 * g + h, passes);
    }
  }
}
#endif

/// Runs the tiles of rows [0, m) of a row block against one panel; `row(i)` is the i-th input row.
/// Leaves the results in c[m][64]. `short_loops` (tuning::short_loops): one or two rows may run the
/// decode loop, which sums in another order than the tiles. Bf16Rows: the rows hold bf16 values
/// (the scheme rounds its GEMM inputs), which the quantized panels' decode may take as bf16 pairs.
template <bool Bf16Rows = false, class W, class RowOf>
inline void block_times_panel(index_t m, RowOf row, index_t K, const W* panel, float* c, bool short_loops) {
  const float* rows[max_tile_rows];
  if (short_loops && m <= decode_rows) {
    for (index_t i = 0; i < m; ++i) rows[i] = row(i);
    if (m == 1)
      decode_tile<1>(rows, K, panel, c);
    else
      decode_tile<2>(rows, K, panel, c);
    return;
  }
  constexpr auto row_bytes = static_cast<index_t>(panel_cols * sizeof(W));
#if POLYMOE_TILED_AVX512 && POLYMOE_TILED_TALL
  if constexpr (std::is_same_v<W, std::uint16_t>)
    if (m > max_tile_rows) return tall_block_times_panel(m, row, K, panel, c);
#endif
  for (index_t k0 = 0; k0 < K; k0 += k_block<W>) {
    const index_t k1 = std::min(K, k0 + k_block<W>);
    for (index_t r0 = 0; r0 < m; r0 += max_tile_rows) {
      const int n = static_cast<int>(std::min<index_t>(max_tile_rows, m - r0));
      for (int i = 0; i < n; ++i) rows[i] = row(r0 + i);
      // The first tile of a slab fetches the next slab (past the panel's end: the next panel).
      tile_rows(n, rows, k0, k1, panel, c + r0 * panel_cols, k0 > 0,
                r0 == 0 ? reinterpret_cast<const char*>(panel + k1 * panel_cols) : nullptr, row_bytes);
    }
  }
}

/// The same for a quantized panel: widened in registers for one or two rows (decode, where
/// `short_loops`; E2M1 panels in bf16 pairs where vdpbf16ps is chosen, fp32 rows as two bf16
/// terms: decode_qtile_bf16) and for up to four (qtile: the bits of the slab path), else a slab at a time
/// into an L1 buffer that all the block's tiles share (see qpanel.hpp).
template <bool Bf16Rows = false, class F, class RowOf>
inline void block_times_panel(index_t m, RowOf row, index_t K, const QPanel<F>& panel, float* c, bool short_loops) {
  const float* rows[max_tile_rows];
#if POLYMOE_TILED_AVX512
  if (m <= max_qtile_rows) {
    for (index_t i = 0; i < m; ++i) rows[i] = row(i);
    const auto decode = [&]<int M>() {
#if POLYMOE_TILED_DPBF16
      if constexpr (F::code == qcode::e2m1) return decode_qtile_bf16<M, !Bf16Rows>(rows, K, panel, c);
#endif
      decode_qtile<M>(rows, K, panel, c);
    };
    if (m == 1)
      short_loops ? decode.template operator()<1>() : qtile<1>(rows, K, panel, c);
    else if (m == 2)
      short_loops ? decode.template operator()<2>() : qtile<2>(rows, K, panel, c);
    else if (m == 3)
      qtile<3>(rows, K, panel, c);
    else
      qtile<4>(rows, K, panel, c);
    return;
  }
#else
  (void)short_loops;
#endif
  constexpr index_t kb = k_block<float>;
  alignas(64) float slab[kb * panel_cols];
  for (index_t k0 = 0; k0 < K; k0 += kb) {
    const index_t k1 = std::min(K, k0 + kb);
    expand(panel, k0, k1, slab);
    for (index_t r0 = 0; r0 < m; r0 += max_tile_rows) {
      const int n = static_cast<int>(std::min<index_t>(max_tile_rows, m - r0));
      for (int i = 0; i < n; ++i) rows[i] = row(r0 + i) + k0;
      tile_rows(n, rows, 0, k1 - k0, slab, c + r0 * panel_cols, k0 > 0, nullptr, 0);
    }
  }
}

}  // namespace detail

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_PANEL_PRODUCTS
