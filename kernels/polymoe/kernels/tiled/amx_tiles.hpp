// The tile configuration and the tile operations of one k-block: loading C, the products of bf16,
// int8 and split-bf16 rows against a panel's column tiles, storing C, and the prefetch distances.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_AMX_TILES) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_AMX_TILES
#undef POLYMOE_TILED_GUARD_AMX_TILES
#else
#define POLYMOE_TILED_GUARD_AMX_TILES
#endif
#include <cstdint>


#include <polymoe/kernels/tiled/amx_cpu.hpp>
#include <polymoe/kernels/tiled/amx_layout.hpp>
#include <polymoe/kernels/tiled/microkernel.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

#if POLYMOE_TILED_AMX_CODE

#define POLYMOE_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,amx-int8")))

namespace amx {

struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

/// Eight tiles of 16 rows x 64 bytes (loaded per block: other code on the thread may reconfigure).
/// Not _tile_loadconfig: GCC's version hands the asm only the first 8 bytes of the configuration
/// as its memory operand, so the stores of the rest may be dropped as dead (seen at -O2 on a local
/// configuration: ldtilecfg read palette 1 with every tile unconfigured, and the first tile
/// instruction faulted). Here the whole 64-byte object is the operand.
POLYMOE_AMX_TARGET inline void configure() noexcept {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) cfg.colsb[i] = 64, cfg.rows[i] = 16;
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

/// k-blocks per 32 KiB slab of a panel (4 column tiles of 1 KiB per k-block): what block22 runs
/// per pass over a row block. 4, 16 and 32 were measured too (16 faster with L2-resident weights,
/// slower with streamed ones; 4 and 32 no better; docs/decisions.md#amx-loop).
inline constexpr index_t slab_kb = 8;

/// Bytes of one k-block of a panel (4 column tiles of 1 KiB, bf16 and int8 alike).
inline constexpr index_t kb_bytes = 4096;

/// How many k-blocks ahead the A tile is prefetched (device machine, alternating in one process:
/// 2 was as fast as 1 or up to 5.5 % faster in five pairs; 3 no better than 2;
/// docs/decisions.md#amx-prefetch).
inline constexpr index_t a_prefetch_kb = 2;

/// Fetches the 16 rows of one A tile into L1 (the rows are lda_bytes apart: each its own line).
inline void prefetch_tile_rows(const void* a, long lda_bytes) noexcept {
  const char* c = static_cast<const char*>(a);
  for (int r = 0; r < 16; ++r) _mm_prefetch(c + r * lda_bytes, _MM_HINT_T0);
}

/// The products of one k-block for bf16 (C fp32): A rows against B tiles of the tile layout, four
/// column tiles 1 KiB apart per k-block.
struct bf16_ops {
  using a_type = std::uint16_t;
  using b_type = std::uint16_t;
  static constexpr index_t a_k = amx_kb;                ///< k per A tile row (64 bytes)
  static constexpr bool two_terms = false;              ///< A as one term (bf16x2_ops: two)
  static constexpr index_t b_kb = 4 * amx_tile_elems;   ///< B elements per k-block
  /// 2 x 2: tiles 0-1 (+)= A tile (a0) times column tiles b and b + 1; with Two, tiles 2-3 the
  /// same for a1. A tiles 4-5, B tiles 6-7.
  template <bool Two>
  POLYMOE_AMX_TARGET static void products22(const a_type* a0, const a_type* a1, long lda_bytes, const b_type* b) noexcept {
    _tile_loadd(4, a0, lda_bytes);
    _tile_loadd(6, b, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, b + amx_tile_elems, 64);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (Two) {
      _tile_loadd(5, a1, lda_bytes);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  static constexpr index_t col_step = amx_tile_elems;  ///< B elements from one column tile to the next
};

/// The same for int8 (C int32, A u8, B s8): the B tiles of int8.hpp's tile layout, 1 KiB each
/// (16 quads x 16 columns x 4), column tiles 1 KiB apart.
struct int8_ops {
  using a_type = std::uint8_t;
  using b_type = std::int8_t;
  static constexpr index_t a_k = 64;
  static constexpr index_t b_kb = 4 * 1024;
  /// The same, bf16_ops::products22 for tdpbusd.
  template <bool Two>
  POLYMOE_AMX_TARGET static void products22(const a_type* a0, const a_type* a1, long lda_bytes, const b_type* b) noexcept {
    _tile_loadd(4, a0, lda_bytes);
    _tile_loadd(6, b, 64);
    _tile_dpbusd(0, 4, 6);
    _tile_loadd(7, b + 1024, 64);
    _tile_dpbusd(1, 4, 7);
    if constexpr (Two) {
      _tile_loadd(5, a1, lda_bytes);
      _tile_dpbusd(2, 5, 6);
      _tile_dpbusd(3, 5, 7);
    }
  }
  static constexpr index_t col_step = 1024;
};

/// bf16 weights against fp32 activations carried as two bf16 terms, x = hi + lo (split_bf16_row:
/// hi = bf16(x), lo = bf16(x - hi), so |x - hi - lo| <= 2^-17 |x|): an A k-block is 64 elements,
/// hi[32] then lo[32], and both multiply the same B tiles, loaded once (kernel::tiled_amx's MXFP4
/// path, whose weights are exact in bf16; amx_e2m1.hpp). Tiles 0-3 (+)= hi · B + lo · B.
struct bf16x2_ops {
  using a_type = std::uint16_t;
  using b_type = std::uint16_t;
  static constexpr index_t a_k = 2 * amx_kb;
  static constexpr bool two_terms = true;
  static constexpr index_t b_kb = 4 * amx_tile_elems;
  template <bool Two>
  POLYMOE_AMX_TARGET static void products22(const a_type* a0, const a_type* a1, long lda_bytes, const b_type* b) noexcept {
    bf16_ops::products22<Two>(a0, a1, lda_bytes, b);  // hi; leaves the B tiles in 6-7
    _tile_loadd(4, a0 + amx_kb, lda_bytes);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (Two) {
      _tile_loadd(5, a1 + amx_kb, lda_bytes);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  static constexpr index_t col_step = amx_tile_elems;
};

/// Split rows (bf16x2_ops' layout) whose lo terms are all zero, the hi term alone: rows of values
/// that are bf16 values already (an engine's bf16 hidden states) give lo = bf16(x - hi) = 0, whose
/// products add +-0 to sums that start from +0 and so never change them; leaving them out gives
/// bf16x2_ops' bits with half its tile work.
struct bf16x2_hi_ops : bf16_ops {
  static constexpr index_t a_k = 2 * amx_kb;
};

/// k-block j of the weight stream that runs through `panel` (nkb k-blocks) and on into `next`,
/// the panel the caller multiplies next (nullptr: none, or not known): what the prefetch of the
/// next slab fetches, so that the first slab of the next panel is fetched during this one's last
/// slab instead of waiting on memory when its tiles are loaded (a third of a bf16 panel at K = 768,
/// two thirds of an int8 one). nullptr past both. Measured on the device machine, paired against
/// the loop without it (bench_amx --pair, streamed, 16 threads): int8 +0 to +23 %, bf16 +3 to +10 %
/// at 128 rows and -3 to -6 % at 32; the forward of Qwen3-30B-A3B, old and new build alternating:
/// int8 prefill 7-14 % faster, bf16 -5 to +9 % (docs/decisions.md#next-panel-prefetch).
template <class Ops>
inline const typename Ops::b_type* kblock_ahead(const typename Ops::b_type* panel, const typename Ops::b_type* next,
                                                index_t j, index_t nkb) noexcept {
  if (j < nkb) return panel + j * Ops::b_kb;
  if (next != nullptr && j - nkb < nkb) return next + (j - nkb) * Ops::b_kb;
  return nullptr;
}

/// The C tiles of one step: tiles 0-1 are the column tiles at c0 and c0 + 16, tiles 2-3 those at
/// c1 and c1 + 16 (rows 256 bytes apart), zeroed on a slab's first pass (`zero`) or loaded to go
/// on summing; `two` false leaves tiles 2-3 out.
template <class C>
POLYMOE_AMX_TARGET inline void start_c(bool zero, const C* c0, const C* c1, bool two) noexcept {
  if (zero) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    return;
  }
  _tile_loadd(0, c0, 256);
  _tile_loadd(1, c0 + 16, 256);
  if (two) {
    _tile_loadd(2, c1, 256);
    _tile_loadd(3, c1 + 16, 256);
  }
}

/// Stores what start_c loaded.
template <class C>
POLYMOE_AMX_TARGET inline void store_c(C* c0, C* c1, bool two) noexcept {
  _tile_stored(0, c0, 256);
  _tile_stored(1, c0 + 16, 256);
  if (two) {
    _tile_stored(2, c1, 256);
    _tile_stored(3, c1 + 16, 256);
  }
}


}  // namespace amx

#undef POLYMOE_AMX_TARGET

#endif  // POLYMOE_TILED_AMX_CODE

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_AMX_TILES
