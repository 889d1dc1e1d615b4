// The tiled kernel for int8 W8A8: integer GEMMs with AVX512-VNNI (vpdpbusd: unsigned 8-bit
// activations times signed 8-bit weights, four products summed into each 32-bit lane).
//
// vpdpbusd wants one unsigned operand, so an activation q in [-128, 127] travels as q + 128 and
// each column subtracts 128 · sum_k w[k][c], computed once at prepack:
//   sum_k q[k]·w[k][c] = sum_k (q[k] + 128)·w[k][c] − 128·sum_k w[k][c]      (exact in int32)
// The result is then scaled: (acc − comp[c]) · s_row · s_col — the int8_w8a8 policy's values
// (x ≈ q · s_row, W = w · s_col), summed exactly and rounded once instead of once per product.
//
// Layouts. A 64-byte line holds 16 columns x 4 consecutive k (a quad), [16][4], in both:
//   VNNI (kernel::tiled): a quad's four lines are 256 bytes, [K4/4][64 columns][4 k]; K padded to a
//     multiple of 4 with zero weights;
//   tiles (kernel::tiled_amx with AMX): [K64/64][4 column tiles][16 quads][16 columns][4], K padded
//     to a multiple of 64. A B tile of tdpbusd is then 1 KiB in one piece, as bf16's layout, where
//     in the VNNI layout its 16 lines lie 256 bytes apart. Measured on the device machine (bench_amx
//     --pair, streamed, 16 threads, paired A B B A rounds): 128-row blocks 5-20 % faster, 32-row
//     blocks unchanged (docs/decisions.md#int8-tile-layout).
// Activations are quantized once per row into a padded buffer
// (per token for the first GEMM, per sorted row for the second) as the policy's
// quantize_activation does it: s = amax / 127, round to nearest even, saturate. A row holding a
// non-finite value cannot be quantized; its scale is NaN, so its outputs are NaN (the reference
// keeps such a row in fp32 and gets NaN or ±Inf there).
//
// Without AVX512-VNNI (or with POLYMOE_TILED_PORTABLE) a portable loop computes the same integers.
// The forward pass over these panels (and int4's, int4.hpp) is forward_int8, in int8_forward.hpp.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_INT8) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_INT8
#undef POLYMOE_TILED_GUARD_INT8
#else
#define POLYMOE_TILED_GUARD_INT8
#endif
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include <polymoe/quantize/common.hpp>
#include <polymoe/quantize/int8.hpp>
#include <polymoe/kernels/tiled/amx.hpp>
#include <polymoe/kernels/tiled/forward.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

/// k of one vpdpbusd lane.
inline constexpr index_t int8_quad = 4;
/// Largest reduction length whose int32 sums cannot overflow: K · 255 · 128 < 2^31.
inline constexpr index_t int8_max_k = 65536;

[[nodiscard]] constexpr index_t padded_k(index_t K) noexcept { return (K + int8_quad - 1) / int8_quad * int8_quad; }
/// K padded for the tile layout (a tdpbusd tile row is 64 k).
[[nodiscard]] constexpr index_t padded_k64(index_t K) noexcept { return (K + 63) / 64 * 64; }

/// Byte of weight (k, column c) in a panel of either layout (see above).
[[nodiscard]] constexpr index_t int8_slot(index_t k, index_t c, bool tiles) noexcept {
  return tiles ? (k / 64) * 4096 + (c / 16) * 1024 + (k % 64 / int8_quad) * 64 + (c % 16) * int8_quad + k % int8_quad
               : (k / int8_quad) * panel_cols * int8_quad + c * int8_quad + k % int8_quad;
}

/// One int8 panel: codes in the VNNI or (tiles) the tile layout, the compensation 128·sum_k w and
/// the weight scales [64].
struct I8Panel {
  const std::int8_t* codes;
  const std::int32_t* comp;
  const float* scale;
  bool tiles = false;
};

/// All experts' int8 weights of one layer.
struct Int8PackedExperts : PanelGrid {
  using acc_type = std::int32_t;         ///< what a block's products are summed in (forward_int8)
  AlignedBuffer<std::int8_t> w13, w2;    ///< [E][panels][kpad(K) x 64 codes]
  AlignedBuffer<std::int32_t> c13, c2;   ///< [E][panels][64]
  AlignedBuffer<float> s13, s2;          ///< [E][panels][64]
  bool use_amx = false;                  ///< tiled_amx: the tile layout, tdpbusd for blocks large enough
  bool pipelined = false;                ///< tiled_amx: the GEMMs as one pipeline (detail::pipelined_tasks)

  /// K as the panels pad it (and the quantized activation rows with them).
  [[nodiscard]] index_t kpad(index_t K) const noexcept { return use_amx ? padded_k64(K) : padded_k(K); }
  [[nodiscard]] I8Panel panel13(index_t e, index_t cb) const noexcept {
    const index_t i = e * panels13 + cb;
    return {w13.data() + i * kpad(shape.hidden) * panel_cols, c13.data() + i * panel_cols, s13.data() + i * panel_cols,
            use_amx};
  }
  [[nodiscard]] I8Panel panel2(index_t e, index_t cb) const noexcept {
    const index_t i = e * panels2 + cb;
    return {w2.data() + i * kpad(shape.intermediate) * panel_cols, c2.data() + i * panel_cols,
            s2.data() + i * panel_cols, use_amx};
  }
  [[nodiscard]] index_t expert_bytes() const noexcept {
    return (panels13 * kpad(shape.hidden) + panels2 * kpad(shape.intermediate)) * panel_cols +
           (panels13 + panels2) * panel_cols * 8;
  }
};

/// Calls f13(e, i, c, r) for every column c of every GEMM 1 panel i (= e · panels13 + cb) of every
/// expert e that holds a weight row r, and f2 likewise for GEMM 2; experts in parallel (a panel
/// belongs to one expert, so the calls of one panel never race).
template <class F13, class F2>
void for_each_panel_column(const PanelGrid& p, index_t experts, F13 f13, F2 f2) {
  kernels::parallel_for(index_t{0}, experts, [&](index_t e) {
    for (index_t cb = 0; cb < p.panels13; ++cb)
      for (index_t c = 0; c < panel_cols; ++c)
        if (const index_t r = p.row13(cb, c); r >= 0) f13(e, e * p.panels13 + cb, c, r);
    for (index_t cb = 0; cb < p.panels2; ++cb)
      for (index_t c = 0; c < panel_cols; ++c)
        if (const index_t r = p.row2(cb, c); r >= 0) f2(e, e * p.panels2 + cb, c, r);
  });
}

/// Packs from the policy's storage: q13(e, r, k) / q2(e, r, k) the int8 weight of canonical row r,
/// s13(e, r) / s2(e, r) its scale; `amx`: in the tile layout, for tdpbusd (sets use_amx);
/// `huge_pages`: as AlignedBuffer's.
template <class Q13, class S13, class Q2, class S2, class B13, class B2>
Int8PackedExperts pack_int8(const ExpertShape& s, Q13 q13, S13 s13, Q2 q2, S2 s2, B13 b13, B2 b2, bool amx = false,
                            bool huge_pages = true) {
  require(s.hidden <= int8_max_k && s.intermediate <= int8_max_k, "tiled kernel: int8 W8A8 sums in int32 need "
          "hidden and intermediate <= ", int8_max_k, ", got ", s.hidden, " and ", s.intermediate);
  Int8PackedExperts p;
  p.init(s, b13, b2, huge_pages);
  p.use_amx = amx;
  const index_t E = s.experts, H4 = p.kpad(s.hidden), I4 = p.kpad(s.intermediate);
  const auto n = [](index_t v) { return static_cast<std::size_t>(v); };
  p.w13 = AlignedBuffer<std::int8_t>(n(E * p.panels13 * H4 * panel_cols), huge_pages);
  p.w2 = AlignedBuffer<std::int8_t>(n(E * p.panels2 * I4 * panel_cols), huge_pages);
  p.c13 = AlignedBuffer<std::int32_t>(n(E * p.panels13 * panel_cols), huge_pages);
  p.c2 = AlignedBuffer<std::int32_t>(n(E * p.panels2 * panel_cols), huge_pages);
  p.s13 = AlignedBuffer<float>(n(E * p.panels13 * panel_cols), huge_pages);
  p.s2 = AlignedBuffer<float>(n(E * p.panels2 * panel_cols), huge_pages);
  const auto fill = [amx](std::int8_t* codes, std::int32_t* comp, float* scale, index_t K, index_t c, auto q, float sc) {
    std::int32_t sum = 0;
    for (index_t k = 0; k < K; ++k) {
      const std::int8_t v = q(k);
      codes[int8_slot(k, c, amx)] = v;
      sum += v;
    }
    comp[c] = 128 * sum;
    scale[c] = sc;
  };
  for_each_panel_column(
      p, E,
      [&](index_t e, index_t i, index_t c, index_t r) {
        fill(p.w13.data() + i * H4 * panel_cols, p.c13.data() + i * panel_cols, p.s13.data() + i * panel_cols,
             s.hidden, c, [&](index_t k) { return q13(e, r, k); }, s13(e, r));
      },
      [&](index_t e, index_t i, index_t c, index_t r) {
        fill(p.w2.data() + i * I4 * panel_cols, p.c2.data() + i * panel_cols, p.s2.data() + i * panel_cols,
             s.intermediate, c, [&](index_t k) { return q2(e, r, k); }, s2(e, r));
      });
  return p;
}

#if POLYMOE_TILED_AVX512
/// x / s, rounded to nearest as the division vdivps would round it, for 16 lanes, from r = 1/s
/// (rounded to nearest) without a division: q0 = x·r, then twice q += (x − q·s)·r, the remainder
/// by an FMA. The first step brings q within an ulp of x/s (x·r is within 1.5 ulps); from there,
/// with the remainder exact, the second gives the rounded quotient (Markstein's theorem). The
/// remainder is exact unless it falls below the normal range: the caller takes this path only for
/// 2^-100 <= s <= 2^100 (quantizer_reciprocal) and divides otherwise, and then the quotient is the
/// division's bit for bit wherever |x / s| >= 2^-8. Below that, where x is within ~2^20 of the
/// smallest normal, the last bit may differ; both round to the integer 0. Checked on the 2-core
/// machine, all x of 11 binades (|x / s| in [2^-3, 2^8)) for 64 scales: every quotient the
/// division's; 57 smaller binades sampled: last bits differed only below 2^-10, no code differed.
/// Five FMA-port operations against a division, which runs on one port at several cycles a vector.
inline __m512 quotient_by_reciprocal(__m512 x, __m512 s, __m512 r) noexcept {
  __m512 q = _mm512_mul_ps(x, r);
  q = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, s, x), r, q);
  return _mm512_fmadd_ps(_mm512_fnmadd_ps(q, s, x), r, q);
}
#endif

/// Whether quantize_row_u8 divides by a scale s through its reciprocal (quotient_by_reciprocal).
[[nodiscard]] constexpr bool quantizer_reciprocal(float s) noexcept { return s >= 0x1p-100f && s <= 0x1p100f; }

/// Quantizes x[0..n) into q[0..n4) (q + 128, padding 128) and returns its scale, as
/// quant::int8_w8a8::quantize_activation does; NaN for a row holding a non-finite value.
inline float quantize_row_u8(const float* x, index_t n, index_t n4, std::uint8_t* q) noexcept {
  std::fill(q + n, q + n4, std::uint8_t{128});
  const float a = quantize::amax_if_finite(x, n);
  if (std::isnan(a)) {
    std::fill_n(q, n, std::uint8_t{128});
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float s = quantize::int8_scale(a);
  index_t i = 0;
#if POLYMOE_TILED_AVX512
  const __m512 vs = _mm512_set1_ps(s), lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
  const auto store = [&](index_t at, __m512 v) {
    // clamped, rounded to nearest even: an exact integer
    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    const __m512i r = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + at),
                     _mm512_cvtepi32_epi8(_mm512_add_epi32(r, _mm512_set1_epi32(128))));
  };
  if (quantizer_reciprocal(s)) {
    const __m512 vr = _mm512_set1_ps(1.0f / s);
    for (; i + 16 <= n; i += 16) store(i, quotient_by_reciprocal(_mm512_loadu_ps(x + i), vs, vr));
  } else {
    for (; i + 16 <= n; i += 16) store(i, _mm512_div_ps(_mm512_loadu_ps(x + i), vs));  // x / s, as the policy
  }
#endif
  for (; i < n; ++i) q[i] = static_cast<std::uint8_t>(quantize::round_to_int8(x[i] / s) + 128);
  return s;
}

#if POLYMOE_TILED_ISA_VNNI

/// Where quad q's line of column tile v lies in a panel of either layout.
template <bool Tiles>
[[nodiscard]] constexpr index_t int8_line(index_t q, index_t v) noexcept {
  return int8_slot(q * int8_quad, v * 16, Tiles);
}

/// acc[MR][4] += sum over quads [q0, q1) of a[r][4q..4q+4) · W[4q..4q+4)[:] in int32, in registers,
/// W a panel in the VNNI or (Tiles) the tile layout. With `prefetch`, also fetches the panel 4 KiB
/// ahead, 256 bytes per quad in memory order (the decode path streams from memory).
template <int MR, bool Tiles>
inline void products_i8(const std::uint8_t* const* a, index_t q0, index_t q1, const std::int8_t* panel,
                        __m512i (&acc)[MR][4], bool prefetch) noexcept {
  for (index_t q = q0; q < q1; ++q) {
    const std::int8_t* wq = panel + int8_line<Tiles>(q, 0);
    if (prefetch)
      prefetch_lines(panel + q * panel_cols * int8_quad, 4096, 4096 + 256);
    constexpr index_t vs = int8_line<Tiles>(0, 1);
    const __m512i w0 = _mm512_load_si512(wq), w1 = _mm512_load_si512(wq + vs);
    const __m512i w2 = _mm512_load_si512(wq + 2 * vs), w3 = _mm512_load_si512(wq + 3 * vs);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      std::int32_t quad;
      std::memcpy(&quad, a[r] + q * int8_quad, sizeof quad);
      const __m512i x = _mm512_set1_epi32(quad);
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], x, w0);
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], x, w1);
      acc[r][2] = _mm512_dpbusd_epi32(acc[r][2], x, w2);
      acc[r][3] = _mm512_dpbusd_epi32(acc[r][3], x, w3);
    }
  }
}

/// C[MR][64] (+)= products_i8's sums over quads [q0, q1).
template <int MR, bool Tiles>
inline void tile_i8(const std::uint8_t* const* a, index_t q0, index_t q1, const std::int8_t* panel, std::int32_t* c,
                    bool accumulate, bool prefetch) noexcept {
  __m512i acc[MR][4];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v)
      acc[r][v] = accumulate ? _mm512_load_si512(c + r * panel_cols + 16 * v) : _mm512_setzero_si512();
  products_i8<MR, Tiles>(a, q0, q1, panel, acc, prefetch);
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm512_store_si512(c + r * panel_cols + 16 * v, acc[r][v]);
}

#else  // portable

template <int MR, bool Tiles>
inline void tile_i8(const std::uint8_t* const* a, index_t q0, index_t q1, const std::int8_t* panel, std::int32_t* c,
                    bool accumulate, bool) noexcept {
  if (!accumulate) std::fill_n(c, MR * panel_cols, 0);
  for (index_t q = q0; q < q1; ++q)
    for (int r = 0; r < MR; ++r)
      for (index_t p = 0; p < panel_cols; ++p) {
        std::int32_t sum = 0;
        for (index_t j = 0; j < int8_quad; ++j)
          sum += static_cast<std::int32_t>(a[r][q * int8_quad + j]) *
                 static_cast<std::int32_t>(panel[int8_slot(q * int8_quad + j, p, Tiles)]);
        c[r * panel_cols + p] += sum;
      }
}

#endif

namespace detail {

/// One row of the int8 epilogue: d[p] = ((acc[p] − comp[p]) · sr · s_col[p] + bias[p]) · wt for
/// p < n (n <= 64; `stream` as add_row's). The integers' scaling fused with what finish13 (bias;
/// wt 1) and finish2_rows (bias and routing weight, into y) do to an fp32 tile: one pass over the
/// block's C where scaling into a tile and then finishing it took two.
inline void scale_i8_row(const std::int32_t* acc, float sr, const I8Panel& panel, const float* bias, float wt, float* d,
                         index_t n, bool stream = false) noexcept {
#if POLYMOE_TILED_AVX512
  const __m512 s = _mm512_set1_ps(sr), w = _mm512_set1_ps(wt);
  stream = streams_row(stream, d, n);
  for (index_t p = 0; p < n; p += 16) {
    const __mmask16 k = simd::tail_mask(n - p);
    const __m512i v = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(k, acc + p), _mm512_maskz_loadu_epi32(k, panel.comp + p));
    const __m512 x = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(v), s), _mm512_maskz_loadu_ps(k, panel.scale + p));
    store_lanes(d + p, k, _mm512_mul_ps(_mm512_add_ps(x, _mm512_maskz_loadu_ps(k, bias + p)), w), stream);
  }
#else
  (void)stream;
  for (index_t p = 0; p < n; ++p)
    d[p] = (static_cast<float>(acc[p] - panel.comp[p]) * sr * panel.scale[p] + bias[p]) * wt;
#endif
}

/// acc[i][p] = sum over k < K4 of row(i)[k] · w[k][p], in int32, for rows [0, m) of a row block
/// (quantized, as q + 128, padded to K4, the panel's padded K) and one int8 panel (scale_i8_row
/// then turns them into values). `tile_stride` > 0 (a panel in the tile layout): the rows are also at
/// row(0), tile_stride bytes apart (and 16 more readable), and AMX runs them when there are
/// `min_rows` or more; `next` then is the codes of the panel the thread multiplies next, or
/// nullptr (see amx::kblock_ahead).
///
/// With tiles, side() is called between k-blocks (amx::block22_side), some number of times; the
/// caller finishes what it is for afterwards.
template <class RowOf, class Side = no_side>
inline void block_times_i8panel(index_t m, RowOf row, index_t K4, const I8Panel& panel, std::int32_t* acc,
                                index_t tile_stride = 0, index_t min_rows = amx_min_rows_int8,
                                const std::int8_t* next = nullptr, Side&& side = Side{}) {
#if POLYMOE_TILED_AMX_CODE
  if (tile_stride > 0 && panel.tiles && m >= min_rows) {
    amx::int8_block(row(0), tile_stride, m, K4, panel.codes, next, acc, side);
    return;
  }
#else
  (void)tile_stride;
  (void)min_rows;
  (void)next;
  (void)side;
#endif
  const std::uint8_t* rows[max_tile_rows];
  constexpr index_t qb = 32768 / (panel_cols * int8_quad);  // quads per 32 KiB slab of the panel (8 x 16)
  const index_t Q = K4 / int8_quad;
  const bool decode = m <= decode_rows;
  for (index_t q0 = 0; q0 < Q; q0 += qb) {
    const index_t q1 = std::min(Q, q0 + qb);
    for (index_t r0 = 0; r0 < m; r0 += max_tile_rows) {
      const int n = static_cast<int>(std::min<index_t>(max_tile_rows, m - r0));
      for (int i = 0; i < n; ++i) rows[i] = row(r0 + i);
      std::int32_t* ci = acc + r0 * panel_cols;
      // (decode: the block is n <= decode_rows rows)
      with_rows<max_tile_rows>(n, [&]<int M>() {
        if (panel.tiles)
          tile_i8<M, true>(rows, q0, q1, panel.codes, ci, q0 > 0, decode);
        else
          tile_i8<M, false>(rows, q0, q1, panel.codes, ci, q0 > 0, decode);
      });
    }
  }
}

}  // namespace detail

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_INT8
