#pragma once
// AMX tile micro-kernels for kernel::tiled_amx: bf16 (tdpbf16ps) and int8 W8A8 (tdpbusd).
//
// ISA choice. A build whose compiler targets AMX (__AMX_TILE__, __AMX_BF16__ and __AMX_INT8__
// defined, e.g. -march=sapphirerapids, or POLYMOE_AMX=ON) uses the tiles unconditionally: there is
// no run-time test, only Linux's permission request, and a machine that refuses it is an error at
// prepare. Any other x86-64 build detects AMX at prepare time (CPUID leaf 7: amx-tile, amx-bf16,
// amx-int8; XCR0 bits 17-18 enabled by the OS; arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)) and
// falls back to the AVX-512 micro-kernels when any of them is missing. The tile code itself is
// compiled for every x86-64 build (function target attributes), so CI keeps compiling it.
//
// Tiles: one configuration for both types, eight tiles of 16 rows x 64 bytes. C tiles are 16 rows
// x 16 columns of fp32 / int32; a row block (up to 256 rows, amx_block_rows) runs in pairs of row
// groups of 16 (2 x 2 register blocking: block22); the weights of a panel are walked in slabs of
// 32 KiB (8 k-blocks x 4 column tiles of 1 KiB), so every row pair after the first reads them
// from L1.
//
//   bf16 weights, AMX layout: per panel [K32/32][4 column tiles][16 k-pairs][16 columns][2] — the
//     B operand of tdpbf16ps, 1 KiB a tile, K padded to a multiple of 32 with zeros. Rows of A are
//     bf16, K32 long, one buffer for the whole batch in sorted-row order.
//   int8 weights: the tile layout of int8.hpp, per panel [K64/64][4 column tiles][16 quads][16
//     columns][4] — the B operand of tdpbusd, 1 KiB a tile, as bf16's. Rows of A are u8, K64 long.
//
// Few rows per block (decode) do not fill a tile: below its threshold (amx_min_rows_bf16 /
// amx_min_rows_int8, or tuning::amx_min_rows) a block runs an AVX-512 FMA loop over the same AMX
// layout (bf16) or the VNNI kernel over the int8 tile layout. The thresholds were measured
// (docs/decisions.md#amx-min-rows).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <polymoe/core/error.hpp>
#include <polymoe/kernels/codecs/bf16.hpp>
#include <polymoe/kernels/tiled/epilogue.hpp>
#include <polymoe/kernels/tiled/microkernel.hpp>

#if defined(POLYMOE_TILED_AVX512) && defined(__x86_64__) && defined(__linux__)
#define POLYMOE_TILED_AMX_CODE 1
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace polymoe::kernels::tiled {

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AMX_INT8__) && defined(POLYMOE_TILED_AMX_CODE)
inline constexpr bool amx_target = true;  ///< the build targets AMX: no run-time detection
#else
inline constexpr bool amx_target = false;
#endif

/// Rows per block from which the tiles are used (below: AVX-512), bf16 and int8. Measured
/// (docs/decisions.md#amx-min-rows): on the 2-core machine bf16 blocks of 8 rows ran faster on tiles
/// than on the FMA loop, blocks of 4 slower; on the device machine (2 threads, three alternating
/// runs) int8 blocks of about 32 rows ran 6-28 % faster on tiles than on VNNI, blocks of 16 as
/// fast either way (both on the VNNI layout, before int8 had a tile layout). tuning::amx_min_rows
/// overrides both, and every other format's threshold (tuning::tiles_from).
inline constexpr index_t amx_min_rows_bf16 = 8;
inline constexpr index_t amx_min_rows_int8 = 16;

/// Why AMX cannot run here, or nullptr when it can (the answer is computed once per process; the
/// permission request is part of it).
inline const char* amx_unavailable_reason() noexcept {
#if defined(POLYMOE_TILED_AMX_CODE)
  static const char* const reason = []() -> const char* {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return "CPUID leaf 7 is missing";
    if (!((d >> 24) & 1u) || !((d >> 22) & 1u) || !((d >> 25) & 1u))
      return "the CPU lacks amx-tile, amx-bf16 or amx-int8";
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1u)) return "the OS has not enabled XSAVE";
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if (((lo >> 17) & 3u) != 3u) return "the OS has not enabled the tile state (XCR0 bits 17-18)";
    constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    if (syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) != 0)
      return "Linux refused the tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM)";
    return nullptr;
  }();
  return reason;
#else
  return "this build has no AVX-512 / x86-64 Linux AMX code";
#endif
}

/// Whether a tiled_amx layer prepared now runs its tiles: always for an AMX-targeted build (an
/// error if the machine refuses), else when amx_unavailable_reason() is nullptr.
inline bool amx_enabled() {
  if constexpr (amx_target) {
    const char* why = amx_unavailable_reason();
    require(why == nullptr, "polymoe: this build targets AMX but ", why ? why : "");
    return true;
  } else {
    return amx_unavailable_reason() == nullptr;
  }
}

/// Elements of a bf16 AMX k-block and tile.
inline constexpr index_t amx_kb = 32;
inline constexpr index_t amx_tile_elems = 512;  ///< 16 k-pairs x 16 columns x 2

[[nodiscard]] constexpr index_t padded_k32(index_t K) noexcept { return (K + amx_kb - 1) / amx_kb * amx_kb; }

/// Row stride, in bytes, for a tile operand whose rows are `row_bytes` long (a multiple of 64): an
/// odd number of cache lines, so that the 16 rows of one tile load fall in 16 different L1 sets.
/// (Rows of 4 KiB, H = 2048 in bf16, put all 16 in one set of a 12-way L1.)
[[nodiscard]] constexpr index_t amx_row_stride_bytes(index_t row_bytes) noexcept {
  return (row_bytes / 64) % 2 == 1 ? row_bytes : row_bytes + 64;
}

/// Where weight (k, column c) of a panel lives in the bf16 AMX layout.
[[nodiscard]] constexpr index_t amx_bf16_slot(index_t k, index_t c) noexcept {
  return ((k / amx_kb) * 4 + c / 16) * amx_tile_elems + ((k % amx_kb) / 2) * 32 + (c % 16) * 2 + k % 2;
}

/// What a tile loop does between its k-blocks (amx::block22_side): nothing.
struct no_side {
  void operator()() const noexcept {}
};

/// The bf16 AMX layout as a PackedExperts layout.
struct amx_layout {
  [[nodiscard]] static constexpr index_t rows(index_t K) noexcept { return padded_k32(K); }
  template <class W>
  [[nodiscard]] static constexpr index_t slot(index_t k, index_t c) noexcept {
    return amx_bf16_slot(k, c);
  }
};
using AmxBf16Experts = PackedExperts<std::uint16_t, amx_layout>;

#if defined(POLYMOE_TILED_AMX_CODE)

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

/// One slab of one block22 step (below): products22 over k-blocks [s0, s1), with the prefetches.
template <class Ops, bool Two, Pf BP, class Side>
POLYMOE_AMX_TARGET inline void slab22(const typename Ops::a_type* a0, const typename Ops::a_type* a1, long lda_bytes,
                                      const typename Ops::b_type* panel, const typename Ops::b_type* next, index_t s0,
                                      index_t s1, index_t nkb, index_t cp, index_t own, index_t own_end,
                                      Side& side) noexcept {
  for (index_t kb = s0; kb < s1; ++kb) {
    const typename Ops::b_type* b = panel + kb * Ops::b_kb;
    if (const auto* ahead = kblock_ahead<Ops>(panel, next, kb + slab_kb, nkb))
      prefetch_lines<BP>(ahead, own, own_end);
    if (cp == 0 && kb + a_prefetch_kb < s1) {
      prefetch_tile_rows(a0 + (kb + a_prefetch_kb) * Ops::a_k, lda_bytes);
      if constexpr (Two) prefetch_tile_rows(a1 + (kb + a_prefetch_kb) * Ops::a_k, lda_bytes);
    }
    Ops::template products22<Two>(a0 + kb * Ops::a_k, a1 + kb * Ops::a_k, lda_bytes, b + 2 * cp * Ops::col_step);
    side();
  }
}

/// c[m][64] (rows [0, roundup(m, 16)) written) = A · panel over nkb k-blocks: A [rows][lda]
/// elements (at least roundup(m, 16) readable rows), C fp32 (bf16_ops) or int32 (int8_ops), with
/// 2 x 2 register blocking: C tiles for (rows r0, r0 + 16) x (column tiles j, j + 1), A tiles 4-5,
/// B tiles 6-7 — four tile loads per four products (a 1 x 4 loop, one A tile against four column
/// tiles, has five), each A and B tile used twice. A slab is slab_kb k-blocks; within it the
/// (row pair, column pair) steps run row pair by row pair (the pair's A lines serve both column
/// pairs). An odd last row group runs the same steps on tiles 0-1 only. Chosen on the device
/// machine (bench_amx, 16 threads, docs/decisions.md#amx-loop): with the weights streamed from
/// DRAM and 128-row blocks it ran 1-28 % faster than the 1 x 4 loop; with 32-row blocks bf16 10-22 %
/// faster, int8 -14 % to +7 %; column pairs outer was no better. The forward did not tell the loops
/// apart beyond its run-to-run spread, so only this one is kept.
///
/// Two software prefetches keep the tile loads from waiting on memory (a tile register has no
/// renaming: a load into the A tile cannot start before the previous k-block's products have read
/// it, so its latency is paid in full unless the lines are already in L1):
///   - each step fetches its share of the next slab's lines (the whole slab between the steps), a
///     few lines per k-block rather than 4 KiB at once; during the last slab, the first slab of
///     `next`, the panel the caller multiplies next (kblock_ahead; nullptr: none);
///   - the first step on a row pair fetches its A lines a_prefetch_kb k-blocks ahead.
/// Against the earlier scheme (the first row group fetched the next slab, A not at all), measured
/// on the device machine's AMX with the forward of the Qwen3-30B-A3B layer, alternating in one
/// process: +5 to +26 % in ten pairs (docs/decisions.md#amx-prefetch). BP is the hint of the next
/// slab's prefetch (a measurement variant; the library runs t0).
///
/// block22_side also calls side() after each k-block's products: vector work that the core runs
/// while the tiles compute (the previous panel's epilogue, row by row). It is called a number of
/// times that depends on the block and the loop, and the caller does what is left afterwards.
///
/// `accumulate`: the C tiles start from c as it is (a caller that feeds the panel slab by slab),
/// not from zero.
template <class Ops, Pf BP, class C, class Side>
POLYMOE_AMX_TARGET inline void block22_side(const typename Ops::a_type* a, index_t lda, index_t m, index_t nkb,
                                            const typename Ops::b_type* panel, const typename Ops::b_type* next, C* c,
                                            Side& side, bool accumulate = false) noexcept {
  static_assert(Ops::b_kb * static_cast<index_t>(sizeof(typename Ops::b_type)) == kb_bytes);
  configure();
  const auto lda_bytes = static_cast<long>(lda * static_cast<index_t>(sizeof(typename Ops::a_type)));
  const index_t pairs = ((m + 15) / 16 + 1) / 2, steps = 2 * pairs;
  const index_t share = (kb_bytes / steps + 63) / 64 * 64;  // bytes per k-block per step
  for (index_t s0 = 0; s0 < nkb; s0 += slab_kb) {
    const index_t s1 = nkb < s0 + slab_kb ? nkb : s0 + slab_kb;
    for (index_t i = 0; i < steps; ++i) {
      const index_t rp = i / 2, cp = i % 2;
      const index_t r0 = 32 * rp;
      const bool two = r0 + 16 < m;
      C* c0 = c + r0 * panel_cols + 32 * cp;
      C* c1 = c0 + 16 * panel_cols;
      start_c(s0 == 0 && !accumulate, c0, c1, two);
      const typename Ops::a_type* a0 = a + r0 * lda;
      const typename Ops::a_type* a1 = a0 + 16 * lda;
      const index_t own = i * share, own_end = std::min(kb_bytes, own + share);
      if (two)
        slab22<Ops, true, BP>(a0, a1, lda_bytes, panel, next, s0, s1, nkb, cp, own, own_end, side);
      else
        slab22<Ops, false, BP>(a0, a1, lda_bytes, panel, next, s0, s1, nkb, cp, own, own_end, side);
      store_c(c0, c1, two);
    }
  }
}

template <class Ops, Pf BP, class C>
POLYMOE_AMX_TARGET inline void block22(const typename Ops::a_type* a, index_t lda, index_t m, index_t nkb,
                                       const typename Ops::b_type* panel, const typename Ops::b_type* next,
                                       C* c) noexcept {
  no_side none;
  block22_side<Ops, BP>(a, lda, m, nkb, panel, next, c, none);
}

/// bf16: A bf16 rows (lda >= K32), panel in the bf16 tile layout; `next` the panel (of the same
/// K) that the caller multiplies next, or nullptr (see kblock_ahead); side() between k-blocks
/// (block22_side).
template <class Side = no_side>
POLYMOE_AMX_TARGET inline void bf16_block(const std::uint16_t* a, index_t lda, index_t m, index_t K32,
                                          const std::uint16_t* panel, const std::uint16_t* next, float* c,
                                          Side&& side = Side{}) noexcept {
  block22_side<bf16_ops, Pf::t0>(a, lda, m, K32 / amx_kb, panel, next, c, side);
}

/// int8: A u8 rows (q + 128; lda >= K4, K4 % 64 == 0), panel in the tile layout of int8.hpp;
/// `next` and side() as bf16_block.
template <class Side = no_side>
POLYMOE_AMX_TARGET inline void int8_block(const std::uint8_t* a, index_t lda, index_t m, index_t K4,
                                          const std::int8_t* panel, const std::int8_t* next, std::int32_t* acc,
                                          Side&& side = Side{}) noexcept {
  block22_side<int8_ops, Pf::t0>(a, lda, m, K4 / 64, panel, next, acc, side);
}

/// One slab of a decoded panel: c (+)= A · slab over nkb <= slab_kb k-blocks, A the rows in Ops'
/// layout (bf16_ops: bf16 rows; bf16x2_ops: split rows) from this slab's first k-block (lda
/// elements apart), c zeroed first unless `accumulate`.
template <class Ops>
POLYMOE_AMX_TARGET inline void decoded_slab(const std::uint16_t* a, index_t lda, index_t m, index_t nkb,
                                            const std::uint16_t* slab, float* c, bool accumulate) noexcept {
  no_side none;
  block22_side<Ops, Pf::t0>(a, lda, m, nkb, slab, nullptr, c, none, accumulate);
}

/// Column tile V of one k-block of decoded_row_group: B tile 6 + V % 2 from b, C tile V (+)= A
/// (tile TA; bf16x2_ops: and its lo term in tile 5) times it. (GCC's tile intrinsics paste their
/// tile numbers into the instruction text: literals only, hence the cases.)
template <class Ops, int TA, int V>
POLYMOE_AMX_TARGET inline void decoded_column(const std::uint16_t* b) noexcept {
  constexpr bool lo = Ops::two_terms;
  b += V * amx_tile_elems;
  if constexpr (V % 2 == 0)
    _tile_loadd(6, b, 64);
  else
    _tile_loadd(7, b, 64);
#define POLYMOE_DECODED_PRODUCTS(C, B)                    \
  do {                                                    \
    if constexpr (TA == 4)                                \
      _tile_dpbf16ps(C, 4, B);                            \
    else                                                  \
      _tile_dpbf16ps(C, 5, B);                            \
    if constexpr (lo) _tile_dpbf16ps(C, 5, B);            \
  } while (false)
  if constexpr (V == 0) POLYMOE_DECODED_PRODUCTS(0, 6);
  if constexpr (V == 1) POLYMOE_DECODED_PRODUCTS(1, 7);
  if constexpr (V == 2) POLYMOE_DECODED_PRODUCTS(2, 6);
  if constexpr (V == 3) POLYMOE_DECODED_PRODUCTS(3, 7);
#undef POLYMOE_DECODED_PRODUCTS
}

/// One k-block of decoded_row_group: C tiles 0-3 (+)= A (tile TA; bf16x2_ops: hi in 4, lo in 5)
/// times the k-block's four column tiles at b, and after column tile v's products, k-pairs
/// [4v, 4v + 4) of the next k-block decoded (`more`: there is one).
template <class Ops, int TA, class Decode>
POLYMOE_AMX_TARGET inline void decoded_kblock(const std::uint16_t* a, long lda_bytes, const std::uint16_t* b,
                                              index_t next_kb, bool more, std::uint16_t* next_b,
                                              Decode& decode) noexcept {
  if constexpr (TA == 4)
    _tile_loadd(4, a, lda_bytes);
  else
    _tile_loadd(5, a, lda_bytes);
  if constexpr (Ops::two_terms) _tile_loadd(5, a + amx_kb, lda_bytes);
  decoded_column<Ops, TA, 0>(b);
  if (more) decode(next_kb, 0, 4, next_b);
  decoded_column<Ops, TA, 1>(b);
  if (more) decode(next_kb, 4, 8, next_b);
  decoded_column<Ops, TA, 2>(b);
  if (more) decode(next_kb, 8, 12, next_b);
  decoded_column<Ops, TA, 3>(b);
  if (more) decode(next_kb, 12, 16, next_b);
}

/// C tiles 0-3 zeroed.
POLYMOE_AMX_TARGET inline void zero_c4() noexcept {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

/// C tiles 0-3 into c[16][64] (rows 256 bytes apart).
POLYMOE_AMX_TARGET inline void store_c4(float* c) noexcept {
  _tile_stored(0, c, 256);
  _tile_stored(1, c + 16, 256);
  _tile_stored(2, c + 32, 256);
  _tile_stored(3, c + 48, 256);
}

/// decoded_row_group (below) with the sums taken a group of group_kb k-blocks at a time (0: one
/// group, the whole panel): after each group's last k-block (or the panel's last) C tiles 0-3 are
/// stored into c[16][64] and zeroed, and group_end(g) runs on them (E4M3's scale groups: scaled and
/// added into the caller's result). Each group's sums in decoded_row_group's order.
template <class Ops, class Decode, class GroupEnd>
POLYMOE_AMX_TARGET inline void decoded_row_group_groups(const std::uint16_t* a, index_t lda, index_t nkb,
                                                        index_t group_kb, Decode&& decode, float* c,
                                                        GroupEnd&& group_end) noexcept {
  static_assert(std::is_same_v<typename Ops::b_type, std::uint16_t>);
  configure();
  const auto lda_bytes = static_cast<long>(lda * 2);
  alignas(64) std::uint16_t ring[2][4 * amx_tile_elems];
  decode(index_t{0}, index_t{0}, amx_kb / 2, ring[0]);
  zero_c4();
  for (index_t kb = 0; kb < nkb; ++kb) {
    if (kb + a_prefetch_kb < nkb)
      for (index_t t = 0; t < (Ops::two_terms ? 2 : 1); ++t)
        prefetch_tile_rows(a + (kb + a_prefetch_kb) * Ops::a_k + t * amx_kb, lda_bytes);
    const std::uint16_t* ak = a + kb * Ops::a_k;
    const bool more = kb + 1 < nkb;
    if constexpr (Ops::two_terms)
      decoded_kblock<Ops, 4>(ak, lda_bytes, ring[kb % 2], kb + 1, more, ring[(kb + 1) % 2], decode);
    else if (kb % 2 == 0)
      decoded_kblock<Ops, 4>(ak, lda_bytes, ring[kb % 2], kb + 1, more, ring[(kb + 1) % 2], decode);
    else
      decoded_kblock<Ops, 5>(ak, lda_bytes, ring[kb % 2], kb + 1, more, ring[(kb + 1) % 2], decode);
    if (group_kb > 0 && ((kb + 1) % group_kb == 0 || !more)) {
      store_c4(c);
      zero_c4();
      group_end(kb / group_kb);
    }
  }
  if (group_kb == 0) store_c4(c);
}

/// c[16][64] = rows [0, 16) of A in Ops' layout (bf16_ops: bf16 rows; bf16x2_ops: split rows;
/// lda elements apart) times a panel of nkb k-blocks in the bf16 tile layout that decode(kb, j0, j1,
/// out) writes a part at a time (k-pairs [j0, j1) of k-block kb into the k-block's 4 KiB at out; the
/// E2M1 and E4M3 decoders' call): a row
/// block of at most 16 rows on a panel kept in codes. All four column tiles at once (C tiles 0-3,
/// four independent sums; A in tile 4, or 4 and 5 by k-block for bf16_ops so that a k-block's A
/// load does not wait on the previous one's products; B tiles 6-7), and k-block kb + 1 decoded into
/// the other half of a two-k-block ring a part after each of k-block kb's column tiles: vector work
/// that the core runs while the tiles compute, where decoding a 32 KiB slab before its products
/// (decoded_slab) leaves the tiles idle during the decode and the core idle during the products.
template <class Ops, class Decode>
POLYMOE_AMX_TARGET inline void decoded_row_group(const std::uint16_t* a, index_t lda, index_t nkb, Decode&& decode,
                                                 float* c) noexcept {
  decoded_row_group_groups<Ops>(a, lda, nkb, 0, decode, c, [](index_t) {});
}

/// One step of a scaled-group loop (amx_e4m3.hpp): part[32][32] (rows [0, 16) only without Two;
/// rows 128 bytes apart) = A rows (a0: 16 rows, a1: the next 16, lda_bytes apart) times column
/// tiles 2cp and 2cp + 1 of a decoded slab of nkb k-blocks, from zero. `pf`: the A rows of the
/// step that follows on another row pair (nullptr: none), whose lines are fetched as the k-blocks go.
template <class Ops, bool Two>
POLYMOE_AMX_TARGET inline void group_step(const typename Ops::a_type* a0, const typename Ops::a_type* a1,
                                          long lda_bytes, const typename Ops::b_type* slab, index_t nkb, index_t cp,
                                          const typename Ops::a_type* pf, float* part) noexcept {
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (Two) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (index_t kb = 0; kb < nkb; ++kb) {
    if (pf != nullptr) {
      prefetch_tile_rows(pf + kb * Ops::a_k, lda_bytes);
      if constexpr (Two) prefetch_tile_rows(reinterpret_cast<const char*>(pf + kb * Ops::a_k) + 16 * lda_bytes, lda_bytes);
    }
    Ops::template products22<Two>(a0 + kb * Ops::a_k, a1 + kb * Ops::a_k, lda_bytes,
                                  slab + kb * Ops::b_kb + 2 * cp * Ops::col_step);
  }
  _tile_stored(0, part, 128);
  _tile_stored(1, part + 16, 128);
  if constexpr (Two) {
    _tile_stored(2, part + 16 * 32, 128);
    _tile_stored(3, part + 16 * 32 + 16, 128);
  }
}

}  // namespace amx

#undef POLYMOE_AMX_TARGET

#endif  // POLYMOE_TILED_AMX_CODE

#if defined(POLYMOE_TILED_AVX512)

/// dst[0..n32) = bf16(src[i] · wt) for i < n (round to nearest even, as codecs::float_to_bf16),
/// then zeros.
inline void to_bf16_row(const float* src, float wt, index_t n, index_t n32, std::uint16_t* dst) noexcept {
  index_t i = 0;
  const __m512 w = _mm512_set1_ps(wt);
  for (; i + 16 <= n; i += 16) {
    const __m512 x = simd::round_bf16(_mm512_mul_ps(_mm512_loadu_ps(src + i), w));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), simd::bf16_bits(x));
  }
  for (; i < n; ++i) dst[i] = codecs::float_to_bf16(src[i] * wt);
  for (; i < n32; ++i) dst[i] = 0;
}

/// Prefetches the panel 4 KiB (a k-block) ahead of k-pair k, in memory order: the 256 bytes of a
/// k-pair's share of the panel, not its own four lines 1 KiB apart. Measured on the 2-core machine
/// (AMD Zen 4, one thread, 4 rows, 1 GiB of panels streamed): 20 GB/s against 10 GB/s for the
/// four lines of the next k-block at their own positions.
inline void prefetch_pair_ahead(const std::uint16_t* panel, index_t k) noexcept {
  prefetch_lines(reinterpret_cast<const char*>(panel) + (k / 2) * 256 + 4096, 0, 256);
}

/// C[MR][64] = sum over k in [0, K) of a[r][k] · W[k][:], a bf16 rows, W a panel in the bf16 AMX
/// layout: the AVX-512 path for blocks of few rows. Each 64-byte line holds 16 columns x (k, k+1).
template <int MR>
inline void amx_layout_tile(const std::uint16_t* const* a, index_t K, const std::uint16_t* panel, float* c) noexcept {
  __m512 acc[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_ps();
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const auto widen = [](std::uint16_t b) { return _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(b) << 16)); };
  for (index_t k = 0; k < K; k += 2) {
    const std::uint16_t* line = panel + amx_bf16_slot(k, 0);
    prefetch_pair_ahead(panel, k);
    __m512 lo[4], hi[4];
    for (int v = 0; v < 4; ++v) {
      const __m512i w = _mm512_load_si512(line + v * amx_tile_elems);
      lo[v] = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
      hi[v] = _mm512_castsi512_ps(_mm512_and_si512(w, hi_mask));
    }
    for (int r = 0; r < MR; ++r) {
      const __m512 x = widen(a[r][k]), y = widen(a[r][k + 1]);  // rows are padded to an even length
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_fmadd_ps(y, hi[v], _mm512_fmadd_ps(x, lo[v], acc[r][v]));
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < 4; ++v) _mm512_store_ps(c + r * panel_cols + 16 * v, acc[r][v]);
}

#if defined(__AVX512BF16__)

/// amx_layout_tile with vdpbf16ps: per k-pair, each lane takes both products of its column (bf16
/// A pair x bf16 W pair, products exact, the sum in fp32 with the instruction's rounding, denormal
/// inputs and results flushed to zero). Where the instruction runs at the FMA's rate (AMD Zen 4:
/// 3.66 G instructions/s on one core for both, measured on the 2-core machine) that is twice the
/// FMA loop's flops, with no widening. The sums differ from the FMA loop's in rounding only; they
/// still depend on the row and the panel alone.
template <int MR>
inline void amx_layout_tile_dp(const std::uint16_t* const* a, index_t K, const std::uint16_t* panel,
                               float* c) noexcept {
  __m512 acc[MR][4];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_ps();
  for (index_t k = 0; k < K; k += 2) {
    const std::uint16_t* line = panel + amx_bf16_slot(k, 0);
    prefetch_pair_ahead(panel, k);
    __m512bh w[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) w[v] = reinterpret_cast<__m512bh>(_mm512_load_si512(line + v * amx_tile_elems));
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      std::int32_t pair;  // rows are padded to an even length
      std::memcpy(&pair, a[r] + k, sizeof pair);
      const __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], x, w[v]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm512_store_ps(c + r * panel_cols + 16 * v, acc[r][v]);
}

/// The decode path of amx_layout_tile_dp (one or two rows: the time is the weight stream's). It
/// walks the panel in memory order, a column tile's 16 k-pairs after another, rather than a
/// k-pair of all four column tiles at a time: those four lines 1 KiB apart per step left the
/// hardware prefetchers of the 2-core machine (AMD Zen 4) behind, at about 20 GB/s of weights
/// against 33 GB/s for a linear stream. Two accumulator sets (even and odd k-pairs) per column
/// tile. K is padded to a multiple of 32 (the rows and the panel hold zeros there). Every line is
/// prefetched Ahead bytes before it is loaded, with hint P (measurement variants; the library runs
/// t0, 4 KiB).
template <int MR, Pf P = Pf::t0, index_t Ahead = 4096>
inline void amx_layout_decode_dp(const std::uint16_t* const* a, index_t K, const std::uint16_t* panel,
                                 float* c) noexcept {
  static_assert(MR >= 1 && MR <= 2);
  __m512 even[MR][4], odd[MR][4];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) even[r][v] = odd[r][v] = _mm512_setzero_ps();
  const auto pair = [](const std::uint16_t* p) {
    std::int32_t bits;
    std::memcpy(&bits, p, sizeof bits);
    return reinterpret_cast<__m512bh>(_mm512_set1_epi32(bits));
  };
  const index_t K32 = padded_k32(K);
  for (index_t k0 = 0; k0 < K32; k0 += amx_kb) {
    const std::uint16_t* block = panel + (k0 / amx_kb) * 4 * amx_tile_elems;
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const std::uint16_t* tile = block + v * amx_tile_elems;
#pragma GCC unroll 8
      for (index_t kp = 0; kp < amx_kb / 2; kp += 2) {
        const std::uint16_t* line = tile + kp * 32;
        prefetch_lines<P>(line, Ahead, Ahead + 128);
        const __m512bh w0 = reinterpret_cast<__m512bh>(_mm512_load_si512(line));
        const __m512bh w1 = reinterpret_cast<__m512bh>(_mm512_load_si512(line + 32));
#pragma GCC unroll 6
        for (int r = 0; r < MR; ++r) {
          even[r][v] = _mm512_dpbf16_ps(even[r][v], pair(a[r] + k0 + 2 * kp), w0);
          odd[r][v] = _mm512_dpbf16_ps(odd[r][v], pair(a[r] + k0 + 2 * kp + 2), w1);
        }
      }
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm512_store_ps(c + r * panel_cols + 16 * v, _mm512_add_ps(even[r][v], odd[r][v]));
}

#endif

#else  // portable

inline void to_bf16_row(const float* src, float wt, index_t n, index_t n32, std::uint16_t* dst) noexcept {
  for (index_t i = 0; i < n; ++i) dst[i] = codecs::float_to_bf16(src[i] * wt);
  for (index_t i = n; i < n32; ++i) dst[i] = 0;
}

#endif

/// Columns [n, n32) of the first `rows` bf16 tile rows of `tile_rows` (ld elements apart) set to
/// zero: the K padding past n that the tiles read (GEMM 2's inputs, whose epilogue writes columns
/// [0, n) only).
inline void zero_k_padding(std::uint16_t* tile_rows, index_t rows, index_t ld, index_t n, index_t n32) noexcept {
  if (n32 > n)
    for (index_t r = 0; r < rows; ++r) std::fill_n(tile_rows + r * ld + n, n32 - n, std::uint16_t{0});
}

}  // namespace polymoe::kernels::tiled
