// The tiled kernel for int4 W4A8 (quant::int4_w4a8): int8's integer GEMMs (int8.hpp) on weights
// kept as nibbles in the panels and unpacked to int8 just before the products, a group of 32 k at
// a time. The activations are int8's (quantize_row_u8: q + 128, per row) and so is the forward
// (forward_int8, int8_forward.hpp).
//
// A panel is int8's panel of the same layout (int8_slot: VNNI, or tiles for kernel::tiled_amx with
// AMX) with two lines to a line: line j of the packed panel holds line 2j of the int8 image in its
// low nibbles and line 2j + 1 in its high nibbles, each code w as w + 8 (0..15), so a panel is half
// of int8's bytes, and a line unpacks to the int8 image with a shift, a mask and a 16-entry table
// look-up, or to w + 8 with the shift and the mask alone (decode, below). K is padded to whole
// groups (VNNI) or whole tile rows of 64 (tiles) with code 0.
//
// Each group g of 32 k has its own scale per column, so an int32 sum cannot run across groups:
//   acc_g[c] = sum_{k in g} (q[k] + 128) · w[k][c] − comp_g[c],   comp_g[c] = 128 · sum_{k in g} w[k][c]
//   y[c] = s_row · sum_g acc_g[c] · s_g[c]
// acc_g is exact in int32 and in fp32 (|acc_g| <= 32 · 128 · 8 < 2^24); the groups are scaled and
// summed in fp32, group after group, into the block's fp32 accumulators.
//   Decode (one or two rows) takes the same acc_g another way, without comp: the products of the
//   unsigned w + 8 and the signed q (vpdpbusd's operands the other way round), less 8 · Σ q:
//     acc_g[c] = sum_{k in g} (w[k][c] + 8) · q[k] − 8 · sum_{k in g} q[k]
//   so it reads the packed codes and the scales only, and unpacks a line with a shift and a mask.
//   VNNI: a slab of groups is unpacked into an L1 buffer in int8's VNNI layout; each group of 3
//     rows of the block then runs int8's products over the slab's groups, its fp32 sums kept in
//     registers across the slab (loading and storing them at each group cost about a third of a
//     prefill: docs/decisions.md#int4-slab-rows).
//   Tiles: a tdpbusd tile row is 64 k, two groups; each group runs on its own, as int8's
//     amx::int8_block over one k-block whose other group is zero weights: twice the tile work of
//     int8 for the same weights (a tile configuration of 32-k rows would avoid it).
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_INT4) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_INT4
#undef POLYMOE_TILED_GUARD_INT4
#else
#define POLYMOE_TILED_GUARD_INT4
#endif
#include <algorithm>
#include <cstdint>
#include <cstring>

#include <polymoe/quantize/int4.hpp>
#include <polymoe/kernels/tiled/int8.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

/// k per weight scale group.
inline constexpr index_t int4_group_k = quantize::int4_group;
/// Bytes of one group of a panel unpacked to int8 (32 k x 64 columns).
inline constexpr index_t int4_group_bytes = int4_group_k * panel_cols;
static_assert(int4_group_k == 32, "the VNNI panels pad K to whole groups with padded_k32");

/// One int4 panel: packed codes (int8's image, two lines to a line), and per group of 32 k the
/// compensation 128 · sum_{k in g} w and the weight scales, [groups][64] each.
struct I4Panel {
  const std::uint8_t* codes;
  const std::int32_t* comp;
  const float* scale;
  bool tiles = false;
};

/// All experts' int4 weights of one layer.
struct Int4PackedExperts : PanelGrid {
  using acc_type = float;                ///< a block's products are summed in fp32, scaled by group
  AlignedBuffer<std::uint8_t> w13, w2;   ///< [E][panels][kpad(K) x 64 / 2 bytes]
  AlignedBuffer<std::int32_t> c13, c2;   ///< [E][panels][kpad(K) / 32][64]
  AlignedBuffer<float> s13, s2;          ///< [E][panels][kpad(K) / 32][64]
  bool use_amx = false;                  ///< tiled_amx: int8's tile layout, tdpbusd for blocks large enough
  bool pipelined = false;                ///< tiled_amx: the GEMMs as one pipeline (detail::pipelined_tasks)

  /// K as the panels pad it (and the quantized activation rows with them).
  [[nodiscard]] index_t kpad(index_t K) const noexcept { return use_amx ? padded_k64(K) : padded_k32(K); }
  [[nodiscard]] I4Panel panel13(index_t e, index_t cb) const noexcept {
    return panel(w13, c13, s13, e * panels13 + cb, shape.hidden);
  }
  [[nodiscard]] I4Panel panel2(index_t e, index_t cb) const noexcept {
    return panel(w2, c2, s2, e * panels2 + cb, shape.intermediate);
  }
  [[nodiscard]] index_t expert_bytes() const noexcept {
    const index_t k13 = kpad(shape.hidden), k2 = kpad(shape.intermediate);
    return (panels13 * k13 + panels2 * k2) * panel_cols / 2 +
           (panels13 * k13 + panels2 * k2) / int4_group_k * panel_cols * 8;
  }

 private:
  [[nodiscard]] I4Panel panel(const AlignedBuffer<std::uint8_t>& w, const AlignedBuffer<std::int32_t>& c,
                              const AlignedBuffer<float>& s, index_t i, index_t K) const noexcept {
    const index_t Kp = kpad(K), groups = Kp / int4_group_k;
    return {w.data() + i * Kp * panel_cols / 2, c.data() + i * groups * panel_cols, s.data() + i * groups * panel_cols,
            use_amx};
  }
};

/// Packs from the policy's storage: q13(e, r, k) / q2(e, r, k) the int4 code (-8..7) of canonical
/// row r, s13(e, r, g) / s2(e, r, g) the scale of its group g; `amx`: in int8's tile layout (sets
/// use_amx); `huge_pages`: as AlignedBuffer's.
template <class Q13, class S13, class Q2, class S2, class B13, class B2>
Int4PackedExperts pack_int4(const ExpertShape& s, Q13 q13, S13 s13, Q2 q2, S2 s2, B13 b13, B2 b2, bool amx,
                            bool huge_pages) {
  Int4PackedExperts p;
  p.init(s, b13, b2, huge_pages);
  p.use_amx = amx;
  const index_t E = s.experts, H4 = p.kpad(s.hidden), I4 = p.kpad(s.intermediate);
  const index_t gH = H4 / int4_group_k, gI = I4 / int4_group_k;
  const auto n = [](index_t v) { return static_cast<std::size_t>(v); };
  p.w13 = AlignedBuffer<std::uint8_t>(n(E * p.panels13 * H4 * panel_cols / 2), huge_pages);
  p.w2 = AlignedBuffer<std::uint8_t>(n(E * p.panels2 * I4 * panel_cols / 2), huge_pages);
  p.c13 = AlignedBuffer<std::int32_t>(n(E * p.panels13 * gH * panel_cols), huge_pages);
  p.c2 = AlignedBuffer<std::int32_t>(n(E * p.panels2 * gI * panel_cols), huge_pages);
  p.s13 = AlignedBuffer<float>(n(E * p.panels13 * gH * panel_cols), huge_pages);
  p.s2 = AlignedBuffer<float>(n(E * p.panels2 * gI * panel_cols), huge_pages);
  // Column c of a panel: codes at int8's slot, halved (the padding's: code 0, nibble 8); padding
  // groups keep scale 0.
  std::memset(p.w13.data(), 0x88, p.w13.size());
  std::memset(p.w2.data(), 0x88, p.w2.size());
  const auto fill = [amx](std::uint8_t* codes, std::int32_t* comp, float* scale, index_t K, index_t c, auto q,
                          auto sc) {
    for (index_t k = 0; k < K; ++k) {
      const std::int8_t v = q(k);
      const index_t at = int8_slot(k, c, amx), line = at / 64;
      const int shift = static_cast<int>(line % 2 * 4);
      std::uint8_t& b = codes[line / 2 * 64 + at % 64];
      b = static_cast<std::uint8_t>((b & (0xF0 >> shift)) | (v + 8) << shift);
      comp[k / int4_group_k * panel_cols + c] += 128 * v;
    }
    for (index_t g = 0; g * int4_group_k < K; ++g) scale[g * panel_cols + c] = sc(g);
  };
  for_each_panel_column(
      p, E,
      [&](index_t e, index_t i, index_t c, index_t r) {
        fill(p.w13.data() + i * H4 * panel_cols / 2, p.c13.data() + i * gH * panel_cols,
             p.s13.data() + i * gH * panel_cols, s.hidden, c, [&](index_t k) { return q13(e, r, k); },
             [&](index_t g) { return s13(e, r, g); });
      },
      [&](index_t e, index_t i, index_t c, index_t r) {
        fill(p.w2.data() + i * I4 * panel_cols / 2, p.c2.data() + i * gI * panel_cols,
             p.s2.data() + i * gI * panel_cols, s.intermediate, c, [&](index_t k) { return q2(e, r, k); },
             [&](index_t g) { return s2(e, r, g); });
      });
  return p;
}

namespace detail {

/// Line `line` (64 codes) of a packed panel's int8 image, unpacked into dst (64-byte aligned).
inline void unpack_int4_line(const std::uint8_t* codes, index_t line, std::int8_t* dst) noexcept {
  const std::uint8_t* src = codes + line / 2 * 64;
  const int shift = static_cast<int>(line % 2) * 4;
#if POLYMOE_TILED_AVX512
  const __m512i table = _mm512_broadcast_i32x4(_mm_setr_epi8(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7));
  __m512i v = _mm512_load_si512(src);
  if (shift) v = _mm512_srli_epi16(v, 4);
  v = _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
  _mm512_store_si512(dst, _mm512_shuffle_epi8(table, v));
#else
  for (index_t i = 0; i < 64; ++i) dst[i] = static_cast<std::int8_t>(((src[i] >> shift) & 0xF) - 8);
#endif
}

/// acc[p] (+)= (part[p] − comp_g[p]) · s_g[p] for the rows × 64 sums of group g (`first`: =).
inline void add_int4_group(const std::int32_t* part, index_t rows, const I4Panel& panel, index_t g, float* acc,
                           bool first) noexcept {
  const std::int32_t* comp = panel.comp + g * panel_cols;
  const float* scale = panel.scale + g * panel_cols;
  for (index_t r = 0; r < rows; ++r) {
    const std::int32_t* pr = part + r * panel_cols;
    float* ar = acc + r * panel_cols;
#if POLYMOE_TILED_AVX512
    for (index_t p = 0; p < panel_cols; p += 16) {
      const __m512 x = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_load_si512(pr + p), _mm512_load_si512(comp + p)));
      const __m512 s = _mm512_load_ps(scale + p);
      _mm512_store_ps(ar + p, first ? _mm512_mul_ps(x, s) : _mm512_fmadd_ps(x, s, _mm512_load_ps(ar + p)));
    }
#else
    for (index_t p = 0; p < panel_cols; ++p) {
      const float x = static_cast<float>(pr[p] - comp[p]) * scale[p];
      ar[p] = first ? x : ar[p] + x;
    }
#endif
  }
}

/// The int4 epilogue of one row: d[p] = (acc[p] · sr + bias[p]) · wt for p < n (acc: the row's
/// group-scaled sums, add_int4_group's; `stream` as add_row's), as scale_i8_row for int8.
inline void scale_i4_row(const float* acc, float sr, const I4Panel&, const float* bias, float wt, float* d, index_t n,
                         bool stream = false) noexcept {
#if POLYMOE_TILED_AVX512
  const __m512 s = _mm512_set1_ps(sr), w = _mm512_set1_ps(wt);
  stream = streams_row(stream, d, n);
  for (index_t p = 0; p < n; p += 16) {
    const __mmask16 k = simd::tail_mask(n - p);
    const __m512 x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, acc + p), s, _mm512_maskz_loadu_ps(k, bias + p));
    store_lanes(d + p, k, _mm512_mul_ps(x, w), stream);
  }
#else
  (void)stream;
  for (index_t p = 0; p < n; ++p) d[p] = (acc[p] * sr + bias[p]) * wt;
#endif
}

#if POLYMOE_TILED_ISA_VNNI

/// f[r] = (sum[r] − comp_g) · s_g, added to f[r] unless `first`: add_int4_group's scaling of MR
/// rows of group g's int32 sums, in registers.
template <int MR>
inline void scale_i4_group(const __m512i (&sum)[MR][4], const I4Panel& panel, index_t g, __m512 (&f)[MR][4],
                           bool first) noexcept {
  const std::int32_t* comp = panel.comp + g * panel_cols;
  const float* scale = panel.scale + g * panel_cols;
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) {
    const __m512i c = _mm512_load_si512(comp + 16 * v);
    const __m512 sc = _mm512_load_ps(scale + 16 * v);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      // the zero-masked conversion (all lanes): the plain one's undefined pass-through trips GCC
      // 12's false uninitialized warning once inlined here
      const __m512 x = _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_sub_epi32(sum[r][v], c));
      f[r][v] = first ? _mm512_mul_ps(x, sc) : _mm512_fmadd_ps(x, sc, f[r][v]);
    }
  }
}

/// The decode path of block_times_i4panel (M = 1 or 2 rows, a panel of either layout): each group's
/// codes unpacked in registers to w + 8 (a shift and a mask) straight into the products with the
/// signed q (the row's bytes with the top bit flipped), less 8 · Σ q of the row's group: the slab
/// path's int32 sums (acc_g above) without reading comp, scaled into the fp32 accumulators in
/// registers with the same operations in the same order, so the same bits.
template <int M, bool Tiles>
inline void decode_i4(const std::uint8_t* const* a, index_t G, const I4Panel& panel, float* acc) noexcept {
  static_assert(M >= 1 && M <= decode_rows);
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const float* scale = panel.scale;
  __m512 f[M][4];
  for (index_t g = 0; g < G; ++g) {
    // the packed bytes stream in memory order, a group (1 KiB) at a time on average in either
    // layout: fetch those 4 KiB ahead, as tile_i8's decode does int8's
    prefetch_lines(panel.codes, g * int4_group_bytes / 2 + 4096, (g + 1) * int4_group_bytes / 2 + 4096);
    __m512i sum[M][4], corr[M];
    for (int r = 0; r < M; ++r) {
      // Σ q = Σ (q + 128) − 128 · 32 over the group's bytes of the row
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[r] + g * int4_group_k));
      const __m256i s4 = _mm256_sad_epu8(x, _mm256_setzero_si256());
      const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
      const auto sq = static_cast<std::int32_t>(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1)) - 128 * int4_group_k;
      corr[r] = _mm512_set1_epi32(8 * sq);
      for (int v = 0; v < 4; ++v) sum[r][v] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int q = 0; q < int4_group_k / int8_quad; ++q) {
      const index_t quad = g * (int4_group_k / int8_quad) + q;
      __m512i w[4];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        // line L of the int8 image: the low (L even) or high nibbles of packed line L / 2; L's
        // parity is v's (VNNI: L = 4 · quad + v) or the quad's (tiles: consecutive quads of a
        // column tile are consecutive lines)
        const index_t line = int8_slot(quad * int8_quad, v * 16, Tiles) / 64;
        __m512i p = _mm512_load_si512(panel.codes + line / 2 * 64);
        if (Tiles ? (q & 1) : (v & 1)) p = _mm512_srli_epi16(p, 4);
        w[v] = _mm512_and_si512(p, nibble);
      }
#pragma GCC unroll 2
      for (int r = 0; r < M; ++r) {
        std::uint32_t x4;
        std::memcpy(&x4, a[r] + quad * int8_quad, sizeof x4);
        const __m512i x = _mm512_set1_epi32(static_cast<std::int32_t>(x4 ^ 0x80808080u));  // q, signed
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) sum[r][v] = _mm512_dpbusd_epi32(sum[r][v], w[v], x);
      }
    }
    // as scale_i4_group, with the row's 8 · Σ q in place of the columns' comp
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512 sc = _mm512_load_ps(scale + g * panel_cols + 16 * v);
#pragma GCC unroll 2
      for (int r = 0; r < M; ++r) {
        const __m512 x = _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_sub_epi32(sum[r][v], corr[r]));
        f[r][v] = g == 0 ? _mm512_mul_ps(x, sc) : _mm512_fmadd_ps(x, sc, f[r][v]);
      }
    }
  }
  for (int r = 0; r < M; ++r)
    for (int v = 0; v < 4; ++v) _mm512_store_ps(acc + r * panel_cols + 16 * v, f[r][v]);
}

/// Rows of a register tile of the slab path: their fp32 sums stay in registers over the slab's
/// groups (f and the int32 sums, 8 vectors a row, with the weights' 4 and the row's broadcast).
inline constexpr int int4_slab_rows = 3;

/// The slab path for MR rows (rows[i]: row i at k = 0) over groups [g0, g1) unpacked in buf:
/// int8's products (products_i8) over each group's quads, the group's int32 sums scaled into the
/// fp32 sums in registers (scale_i4_group), group after group; the fp32 sums loaded and stored
/// once a slab.
template <int MR>
inline void tile_i4_slab(const std::uint8_t* const* rows, index_t g0, index_t g1, const std::int8_t* buf,
                         const I4Panel& panel, float* acc) noexcept {
  __m512 f[MR][4];
#pragma GCC unroll 3
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) f[r][v] = g0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(acc + r * panel_cols + 16 * v);
  const std::uint8_t* at[MR];
  for (index_t g = g0; g < g1; ++g) {
    __m512i sum[MR][4];
#pragma GCC unroll 3
    for (int r = 0; r < MR; ++r) {
      at[r] = rows[r] + g * int4_group_k;
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) sum[r][v] = _mm512_setzero_si512();
    }
    products_i8<MR, false>(at, 0, int4_group_k / int8_quad, buf + (g - g0) * int4_group_bytes, sum, false);
    scale_i4_group<MR>(sum, panel, g, f, g == 0);
  }
#pragma GCC unroll 3
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm512_store_ps(acc + r * panel_cols + 16 * v, f[r][v]);
}

#endif

/// acc[i][p] = sum over groups of the group-scaled sums above, for rows [0, m) of a row block (as
/// block_times_i8panel's rows: q + 128, padded to K4, the panel's padded K) and one int4 panel.
/// `tile_stride`, `min_rows`, `side` as block_times_i8panel's (the tiles run when the panel is in
/// the tile layout and there are min_rows rows or more); `next` is not used (the unpacking reads
/// the panel a group at a time).
template <class RowOf, class Side = no_side>
inline void block_times_i4panel(index_t m, RowOf row, index_t K4, const I4Panel& panel, float* acc,
                                index_t tile_stride = 0, index_t min_rows = amx_min_rows_int8,
                                const std::uint8_t* next = nullptr, Side&& side = Side{}) {
  (void)next;
  const index_t G = K4 / int4_group_k;
#if POLYMOE_TILED_AMX_CODE
  if (tile_stride > 0 && panel.tiles && m >= min_rows) {
    // k-block kb of the tile layout: line v · 16 + quad of column tile v; group h is quads
    // [8h, 8h + 8). half[h] holds group h's quads and zeros in the other group's.
    alignas(64) std::int8_t half[2][amx::kb_bytes] = {};
    alignas(64) std::int32_t part[amx_block_rows * panel_cols];
    for (index_t g = 0; g < G; ++g) {
      const index_t kb = g / 2, h = g % 2;
      for (index_t v = 0; v < 4; ++v)
        for (index_t q = 8 * h; q < 8 * h + 8; ++q)
          unpack_int4_line(panel.codes, kb * 64 + v * 16 + q, half[h] + (v * 16 + q) * 64);
      amx::int8_block(row(0) + kb * 64, tile_stride, m, 64, half[h], nullptr, part, side);
      add_int4_group(part, m, panel, g, acc, g == 0);
    }
    return;
  }
#else
  (void)tile_stride;
  (void)min_rows;
  (void)side;
#endif
#if POLYMOE_TILED_ISA_VNNI
  if (m <= decode_rows && G > 0) {
    const std::uint8_t* two[decode_rows] = {row(0), m > 1 ? row(1) : row(0)};
    if (m == 1)
      panel.tiles ? decode_i4<1, true>(two, G, panel, acc) : decode_i4<1, false>(two, G, panel, acc);
    else
      panel.tiles ? decode_i4<2, true>(two, G, panel, acc) : decode_i4<2, false>(two, G, panel, acc);
    return;
  }
#endif
  // A slab of 8 groups unpacked (16 KiB, in L1 with the rows), then every row group over it.
  constexpr index_t slab = 8;
  alignas(64) std::int8_t buf[slab * int4_group_bytes];
#if !POLYMOE_TILED_ISA_VNNI
  alignas(64) std::int32_t part[max_tile_rows * panel_cols];
#endif
  const std::uint8_t* rows[max_tile_rows];
  for (index_t g0 = 0; g0 < G; g0 += slab) {
    const index_t g1 = std::min(G, g0 + slab);
#if POLYMOE_TILED_AVX512
    if (m <= decode_rows)  // the next slab's packed bytes (decode streams them), as tile_i8 does int8's
      prefetch_lines(panel.codes, g1 * int4_group_bytes / 2, std::min(G, g1 + slab) * int4_group_bytes / 2);
#endif
    // quad q, column tile v of group g: int8's VNNI line q · 4 + v, from the panel's own layout
    for (index_t g = g0; g < g1; ++g)
      for (index_t q = 0; q < int4_group_k / int8_quad; ++q)
        for (index_t v = 0; v < 4; ++v)
          unpack_int4_line(panel.codes, int8_slot(g * int4_group_k + q * int8_quad, v * 16, panel.tiles) / 64,
                           buf + (g - g0) * int4_group_bytes + (q * 4 + v) * 64);
#if POLYMOE_TILED_ISA_VNNI
    for (index_t r0 = 0; r0 < m; r0 += int4_slab_rows) {
      const int n = static_cast<int>(std::min<index_t>(int4_slab_rows, m - r0));
      for (int i = 0; i < n; ++i) rows[i] = row(r0 + i);
      with_rows<int4_slab_rows>(
          n, [&]<int M>() { tile_i4_slab<M>(rows, g0, g1, buf, panel, acc + r0 * panel_cols); });
    }
#else
    for (index_t r0 = 0; r0 < m; r0 += max_tile_rows) {
      const int n = static_cast<int>(std::min<index_t>(max_tile_rows, m - r0));
      for (index_t g = g0; g < g1; ++g) {
        for (int i = 0; i < n; ++i) rows[i] = row(r0 + i) + g * int4_group_k;
        with_rows<max_tile_rows>(n, [&]<int M>() {
          tile_i8<M, false>(rows, 0, int4_group_k / int8_quad, buf + (g - g0) * int4_group_bytes, part, false, false);
        });
        add_int4_group(part, n, panel, g, acc + r0 * panel_cols, g == 0);
      }
    }
#endif
  }
}

}  // namespace detail

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_INT4
