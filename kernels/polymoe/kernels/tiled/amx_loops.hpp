// The tile loops: a row block in pairs of row groups over slabs of a panel (block22, with a hook
// between k-blocks), bf16 and int8 blocks, and the loops of decoded formats (a slab, or a row group
// that decodes each k-block between the previous one's products) and of scaled groups.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_AMX_LOOPS) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_AMX_LOOPS
#undef POLYMOE_TILED_GUARD_AMX_LOOPS
#else
#define POLYMOE_TILED_GUARD_AMX_LOOPS
#endif
#include <cstdint>


#include <polymoe/kernels/tiled/amx_tiles.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

/// What a tile loop does between its k-blocks (amx::block22_side): nothing.
struct no_side {
  void operator()() const noexcept {}
};


#if POLYMOE_TILED_AMX_CODE

#define POLYMOE_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,amx-int8")))

namespace amx {

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

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_AMX_LOOPS
