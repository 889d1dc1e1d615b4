// The tiled kernel's weight layout, built once at prepare time.
//
// Each GEMM's output columns are cut into panels of `panel_cols` (64) columns, four AVX-512
// vectors. A panel stores, for every k of the reduction, its 64 weights contiguously:
// panel[k][0..64). The micro-kernel streams a panel front to back, one k at a time.
//
//   first GEMM (w13, K = H)   gated: panel cb holds gate columns [32cb, 32cb+32) in slots 0..31
//                                    and the matching up columns in slots 32..63, so the activation
//                                    of a tile needs nothing from another tile;
//                             non-gated: panel cb holds columns [64cb, 64cb+64).
//   second GEMM (w2, K = I)   panel cb holds output columns [64cb, 64cb+64) of H.
// Columns past the end of a matrix are zero. Panels start on a cache line.
//
// bf16 weights stay bf16 in memory. A k-row of 64 bf16 is two 64-byte lines; in each line the
// 32-bit lane i holds column i of one vector in its low half and column i of the next vector in
// its high half, so a shift left by 16 and an and with 0xFFFF0000 widen a line to two fp32
// vectors (bf16 -> fp32 is exact: the bf16 bits are the fp32's high half).
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_PREPACK) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_PREPACK
#undef POLYMOE_TILED_GUARD_PREPACK
#else
#define POLYMOE_TILED_GUARD_PREPACK
#endif
#include <cstdint>
#include <type_traits>

#include <polymoe/kernels/parallel.hpp>

#include <polymoe/core/expert_weights.hpp>
#include <polymoe/kernels/tiled/buffer.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

inline constexpr index_t panel_cols = 64;

/// Where column p (0..63) of a panel is stored inside its k-row, for weight type W.
template <class W>
[[nodiscard]] constexpr index_t storage_slot(index_t p) noexcept {
  if constexpr (std::is_same_v<W, std::uint16_t>) {
    const index_t v = p / 16, i = p % 16;
    return (v / 2) * 32 + 2 * i + (v % 2);
  } else {
    return p;
  }
}

/// What every packed layout of the tiled kernel shares: the panel grid of both GEMMs and the
/// biases in panel column order.
struct PanelGrid {
  ExpertShape shape;
  index_t panels13 = 0;      ///< panels per expert in the first GEMM
  index_t panels2 = 0;       ///< panels per expert in the second GEMM
  AlignedBuffer<float> b13;  ///< [E][panels13][64], panel column order, zero without biases
  AlignedBuffer<float> b2;   ///< [E][panels2][64]

  /// Intermediate columns one first-GEMM panel produces (32 gated, 64 non-gated).
  [[nodiscard]] index_t act_cols() const noexcept { return shape.gated ? panel_cols / 2 : panel_cols; }
  [[nodiscard]] const float* bias13(index_t e, index_t cb) const noexcept {
    return b13.data() + (e * panels13 + cb) * panel_cols;
  }
  [[nodiscard]] const float* bias2(index_t e, index_t cb) const noexcept {
    return b2.data() + (e * panels2 + cb) * panel_cols;
  }
  /// Canonical w13 row of column c of first-GEMM panel cb, or -1 for padding.
  [[nodiscard]] index_t row13(index_t cb, index_t c) const noexcept {
    const index_t I = shape.intermediate;
    if (shape.gated) {
      const index_t j = cb * (panel_cols / 2) + c % (panel_cols / 2);
      return j >= I ? -1 : (c < panel_cols / 2 ? j : I + j);
    }
    const index_t j = cb * panel_cols + c;
    return j >= I ? -1 : j;
  }
  /// Canonical w2 row of column c of second-GEMM panel cb, or -1 for padding.
  [[nodiscard]] index_t row2(index_t cb, index_t c) const noexcept {
    const index_t r = cb * panel_cols + c;
    return r >= shape.hidden ? -1 : r;
  }

  /// Sets the grid for shape s and packs the biases (`b13(e)` / `b2(e)`: a bias row or nullptr;
  /// `huge_pages`: as AlignedBuffer's).
  template <class B13, class B2>
  void init(const ExpertShape& s, B13 b13_of, B2 b2_of, bool huge_pages = true) {
    shape = s;
    panels13 = (s.intermediate + act_cols() - 1) / act_cols();
    panels2 = (s.hidden + panel_cols - 1) / panel_cols;
    b13 = AlignedBuffer<float>(static_cast<std::size_t>(s.experts * panels13 * panel_cols), huge_pages);
    b2 = AlignedBuffer<float>(static_cast<std::size_t>(s.experts * panels2 * panel_cols), huge_pages);
    for (index_t e = 0; e < s.experts; ++e) {
      const float* x13 = b13_of(e);
      const float* x2 = b2_of(e);
      for (index_t cb = 0; cb < panels13; ++cb)
        for (index_t c = 0; c < panel_cols; ++c)
          if (const index_t r = row13(cb, c); x13 && r >= 0) b13.data()[(e * panels13 + cb) * panel_cols + c] = x13[r];
      for (index_t cb = 0; cb < panels2; ++cb)
        for (index_t c = 0; c < panel_cols; ++c)
          if (const index_t r = row2(cb, c); x2 && r >= 0) b2.data()[(e * panels2 + cb) * panel_cols + c] = x2[r];
    }
  }
};

/// Where weight (k, column c) of a panel lives: panel[k][storage_slot(c)], K rows.
struct row_layout {
  [[nodiscard]] static constexpr index_t rows(index_t K) noexcept { return K; }
  template <class W>
  [[nodiscard]] static constexpr index_t slot(index_t k, index_t c) noexcept {
    return k * panel_cols + storage_slot<W>(c);
  }
};

/// All experts' weights of one layer in panel layout; W is float (fp32) or std::uint16_t (bf16
/// bits); Layout places the weights inside a panel (row_layout, or amx.hpp's tile layout).
template <class W, class Layout = row_layout>
struct PackedExperts : PanelGrid {
  AlignedBuffer<W> w13;  ///< [E][panels13][rows(H) · 64]
  AlignedBuffer<W> w2;   ///< [E][panels2][rows(I) · 64]
  bool use_amx = false;  ///< tiled_amx: run the tiles (decided at prepare)
  bool pipelined = false;  ///< tiled_amx: the GEMMs as one pipeline (detail::pipelined_tasks)

  [[nodiscard]] const W* panel13(index_t e, index_t cb) const noexcept {
    return w13.data() + (e * panels13 + cb) * Layout::rows(shape.hidden) * panel_cols;
  }
  [[nodiscard]] const W* panel2(index_t e, index_t cb) const noexcept {
    return w2.data() + (e * panels2 + cb) * Layout::rows(shape.intermediate) * panel_cols;
  }
  /// Bytes of one expert's packed weights (what a decode step streams per expert used).
  [[nodiscard]] index_t expert_bytes() const noexcept {
    return (panels13 * Layout::rows(shape.hidden) + panels2 * Layout::rows(shape.intermediate)) * panel_cols *
           static_cast<index_t>(sizeof(W));
  }
};

/// Packs from the canonical layout. `w13(e, row, k)` and `w2(e, row, k)` return the stored weight
/// (float or bf16 bits) of expert e; `b13(e)` / `b2(e)` return its bias row or nullptr;
/// `huge_pages`: as AlignedBuffer's (tuning::huge_pages).
template <class W, class Layout = row_layout, class W13, class W2, class B13, class B2>
PackedExperts<W, Layout> pack_experts(const ExpertShape& s, W13 w13, W2 w2, B13 b13, B2 b2, bool huge_pages = true) {
  PackedExperts<W, Layout> p;
  p.init(s, b13, b2, huge_pages);
  const index_t E = s.experts, H = s.hidden, I = s.intermediate;
  const index_t RH = Layout::rows(H), RI = Layout::rows(I);
  const auto n = [](index_t v) { return static_cast<std::size_t>(v); };
  p.w13 = AlignedBuffer<W>(n(E * p.panels13 * RH * panel_cols), huge_pages);
  p.w2 = AlignedBuffer<W>(n(E * p.panels2 * RI * panel_cols), huge_pages);
  kernels::parallel_for(index_t{0}, E, [&](index_t e) {
    for (index_t cb = 0; cb < p.panels13; ++cb) {
      W* dst = p.w13.data() + (e * p.panels13 + cb) * RH * panel_cols;
      for (index_t c = 0; c < panel_cols; ++c)
        if (const index_t r = p.row13(cb, c); r >= 0)
          for (index_t k = 0; k < H; ++k) dst[Layout::template slot<W>(k, c)] = w13(e, r, k);
    }
    for (index_t cb = 0; cb < p.panels2; ++cb) {
      W* dst = p.w2.data() + (e * p.panels2 + cb) * RI * panel_cols;
      for (index_t c = 0; c < panel_cols; ++c)
        if (const index_t r = p.row2(cb, c); r >= 0)
          for (index_t k = 0; k < I; ++k) dst[Layout::template slot<W>(k, c)] = w2(e, r, k);
    }
  });
  return p;
}

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_PREPACK
