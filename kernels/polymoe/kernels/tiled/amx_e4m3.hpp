// kernel::tiled_amx's forward pass for E4M3 weights (quant::fp8, quant::fp8_block and
// quant::fp8_block_weight_only: kernel::tiled's fp8 panels, an fp32 scale per 128 k per column)
// on the bf16 tiles.
//
// Weights. Every E4M3 value (normal 2^-6 .. 448 with three mantissa bits, subnormal m · 2^-9) is a
// normal bf16 number, so the panels keep their codes (one byte a weight) and a task decodes them a
// group of 128 k (4 tile k-blocks, 16 KiB of bf16) at a time into amx.hpp's tile layout in L1
// (decode_e4m3_slab). The scale is not folded in
// (q · s is not a bf16 number in general): each group's products are summed on the tiles from
// zero, stored, and added into the result times their scales (fp8_times_panel), while the tiles
// run the next step. Blocks of up to 16 rows decode a k-block at a time between the previous
// k-block's products instead (amx::decoded_row_group_groups, as E2M1's row blocks do).
//
// Activations. W8A8 (fp8, fp8_block): a GEMM input row is quantized here, as the scheme's
// quantize_activation does it (scale = amax / 448 per group of 128, or per row for quant::fp8;
// e4m3(x / scale), round to nearest even, saturating; quantize_e4m3_row) but kept as its E4M3
// values, exactly bf16, with the scale beside them. A product of two E4M3 values is exact in fp32;
// the tiles sum a group's 128 of them in fp32, and the group's sum is multiplied by
// (weight scale · activation scale). The reference multiplies the rounded fp32 values
// (e4m3 · scale), so the two differ in rounding only. Weight-only (fp8_block_weight_only): the
// fp32 row enters the tiles as two bf16 terms, hi + lo (split_bf16_row, amx_e2m1.hpp; within
// 2^-17), and a group's sum is multiplied by the weight scale alone.
//
// A group of activations holding an infinity or a NaN is left as it is by the scheme (fp32 values
// that propagate); here it enters the tiles rounded to bf16 with scale 1, so the row's outputs are
// not finite either way.
//
// Blocks of fewer than amx_min_rows_e4m3 rows (W8A8: amx_min_rows_e4m3_w8a8; decode), and every
// block without AMX, run kernel::tiled's fp8 path (qpanel.hpp) on fp32 rows. The forward pass is
// amx_decoded.hpp's, shared with MXFP4.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_AMX_E4M3) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_AMX_E4M3
#undef POLYMOE_TILED_GUARD_AMX_E4M3
#else
#define POLYMOE_TILED_GUARD_AMX_E4M3
#endif
#include <algorithm>
#include <array>
#include <cstdint>

#include <polymoe/codecs/bf16.hpp>
#include <polymoe/codecs/e4m3.hpp>
#include <polymoe/kernels/tiled/amx.hpp>
#include <polymoe/kernels/tiled/amx_e2m1.hpp>
#include <polymoe/kernels/tiled/forward.hpp>
#include <polymoe/kernels/tiled/act_quant.hpp>
#include <polymoe/kernels/tiled/qpanel.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

/// Rows per block from which E4M3 blocks run the tiles (below: kernel::tiled's fp8 path).
/// Measured on the 16-core device machine (docs/decisions.md#amx-min-rows-e4m3; fp8_block,
/// DeepSeek-V3's expert shape with 16 experts, 16 threads, two rounds of the knob at 2, 4, 8, 16 and
/// never), forward ms: about 2 rows per expert, tiles 9.4-9.5 against the FMA path's 8.2-8.9; about
/// 4, tiles 10.8-11.9 against 12.5-14.8; about 8, tiles 10.8-14.3 against 16.5-18.8 (the threshold
/// was 4). Since kernel::tiled runs blocks of 3-4 rows in registers (qtile), bench_amx --threshold
/// (16 threads, K = 2048, 5 paired rounds, two measurements) gives kernel::tiled's time over the
/// tiles', medians: weight-only (split rows on the tiles) at 4 rows 0.78 and 0.80, at 6 rows 1.28
/// and 1.38; W8A8 (E4M3 rows in groups of 128, one term) at 3 rows 0.65, at 4 rows 0.91, at 6 rows
/// 1.52. With blocks of up to 16 rows in the row-group loop (amx::decoded_row_group_groups):
/// weight-only at 4 rows 0.91, at 6 rows 1.60.
/// tuning::amx_min_rows overrides it, as it does the others.
inline constexpr index_t amx_min_rows_e4m3 = 5;

/// The same for W8A8 (quant::fp8, fp8_block: E4M3 rows in groups of 128, one term on the tiles).
/// With the row-group loop (bench_amx --threshold fp8_w8a8, 16 threads, K = 2048, 5 paired rounds;
/// docs/decisions.md#amx-min-rows-e4m3): kernel::tiled's time over the tiles' at 2 rows 1.01, at 3
/// rows 1.03 (quartiles 1.02-1.10), at 4 rows 1.22 (1.19-1.22), at 6 rows 1.90.
inline constexpr index_t amx_min_rows_e4m3_w8a8 = 4;

/// Tile k-blocks per scale group (128 k).
inline constexpr index_t e4m3_group_kb = fp8_format::group / amx_kb;

#if POLYMOE_TILED_AVX512

namespace simd {

/// E4M3 codes (sign-extended to words, no NaN codes) to the bf16 bits of their values: sign,
/// exponent and mantissa moved into place (one shift and one mask) and the exponent re-biased
/// (+120); subnormal codes (exponent 0) looked up in `sub`, the bf16 bits of m · 2^-9 for m < 8,
/// and given their sign back.
inline __m512i e4m3_to_bf16(__m512i s, __m512i sub) noexcept {
  __m512i r = _mm512_add_epi16(_mm512_and_si512(_mm512_slli_epi16(s, 4), _mm512_set1_epi16(static_cast<short>(0x87F0))),
                               _mm512_set1_epi16(120 << 7));
  r = _mm512_mask_permutexvar_epi16(r, _mm512_testn_epi16_mask(s, _mm512_set1_epi16(0x78)), s, sub);
  return _mm512_or_si512(r, _mm512_and_si512(s, _mm512_set1_epi16(static_cast<short>(0x8000))));
}

}  // namespace simd

/// Quantizes src[0..n) · wt for the tiles: groups of `group` values (128, or n and more: one
/// group per row), each with scale s = amax / 448, written as dst[i] = the bf16 bits of
/// e4m3(x[i] / s) (exact) and zeros from n to n32; sa[c] = the scale of the group holding the
/// 128 values from 128c (one entry per 128 values, also for one group per row). An all-zero group
/// is written as zeros with scale 1, a group holding an infinity or a NaN as bf16(x) with scale 1.
inline void quantize_e4m3_row(const float* src, float wt, index_t n, index_t n32, index_t group, std::uint16_t* dst,
                              float* sa) noexcept {
  const __m512 w = _mm512_set1_ps(wt);
  const auto load = [&](index_t i) { return _mm512_mul_ps(_mm512_maskz_loadu_ps(simd::tail_mask(n - i), src + i), w); };
  const auto store = [&](index_t i, __m512 bf16_exact) {
    _mm256_mask_storeu_epi16(dst + i, simd::tail_mask(n - i), simd::bf16_bits(bf16_exact));
  };
  for (index_t g0 = 0; g0 < n; g0 += group) {
    const index_t g1 = std::min(n, g0 + group);
    bool finite = true;
    const float a = simd::amax_of(load, g0, g1, finite);
    float scale = 1.0f;
    if (!finite) {
      for (index_t i = g0; i < g1; i += 16) store(i, simd::round_bf16(load(i)));
    } else if (a == 0.0f) {
      for (index_t i = g0; i < g1; i += 16) store(i, _mm512_setzero_ps());
    } else {
      scale = a / codecs::e4m3_max;  // quantize::e4m3_scale
      const __m512 s = _mm512_set1_ps(scale);
      for (index_t i = g0; i < g1; i += 16) store(i, simd::round_e4m3(_mm512_div_ps(load(i), s)));
    }
    for (index_t c = g0 / fp8_format::group; c * fp8_format::group < g1; ++c) sa[c] = scale;
  }
  std::fill(dst + n, dst + n32, std::uint16_t{0});
}

/// Decodes an fp8 panel of K rows into amx.hpp's bf16 tile layout, a k-block or part of one per
/// call: each weight's E4M3 value as bf16 bits (exact; scales not applied), rows k >= K zero. Per
/// k-pair: the two 64-byte k-rows interleaved byte by byte (vpunpck{l,h}bw: per 16-byte lane,
/// columns 0-7 and 8-15), the lanes put in column-tile order (vpermt2q: two column tiles per
/// register), each column tile's 32 bytes sign-extended to words and converted
/// (simd::e4m3_to_bf16).
class e4m3_decoder {
 public:
  e4m3_decoder(const QPanel<fp8_format>& p, index_t K) noexcept : p_(p), K_(K) {}

  /// k-pairs [j0, j1) of k-block kb into the k-block's four column tiles at out
  /// ([4][16 k-pairs][16 columns][2]). Not inlined: inlined into the tile loop, GCC 12 reports the
  /// undefined upper half inside _mm512_castsi512_si256 / _mm512_extracti64x4_epi64 as an
  /// uninitialized use (a false positive; one call per part of a k-block).
  [[gnu::noinline]] void operator()(index_t kb, index_t j0, index_t j1, std::uint16_t* out) const noexcept {
    static constexpr auto table = [] {  // m · 2^-9 for the subnormal codes m < 8
      std::array<std::uint16_t, 32> t{};
      for (std::uint8_t m = 0; m < 8; ++m) t[m] = codecs::float_to_bf16(codecs::e4m3_to_float(m));
      return t;
    }();
    const __m512i sub = _mm512_loadu_si512(table.data());
    // qwords of (lo, hi): column tiles 0-1 are lanes lo0 hi0 lo1 hi1, column tiles 2-3 lo2 hi2 lo3 hi3
    const __m512i tiles01 = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    const __m512i tiles23 = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    constexpr index_t row_bytes = fp8_format::row_bytes;  // 64
    for (index_t j = j0; j < j1; ++j) {
      const index_t k = kb * amx_kb + 2 * j;
      const std::uint8_t* row = p_.codes + k * row_bytes;
      _mm_prefetch(reinterpret_cast<const char*>(row) + fp8_format::group * row_bytes, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(row) + fp8_format::group * row_bytes + 64, _MM_HINT_T0);
      const __m512i r0 = k < K_ ? _mm512_loadu_si512(row) : _mm512_setzero_si512();
      const __m512i r1 = k + 1 < K_ ? _mm512_loadu_si512(row + row_bytes) : _mm512_setzero_si512();
      const __m512i lo = _mm512_unpacklo_epi8(r0, r1), hi = _mm512_unpackhi_epi8(r0, r1);
      const __m512i pair[2] = {_mm512_permutex2var_epi64(lo, tiles01, hi), _mm512_permutex2var_epi64(lo, tiles23, hi)};
      for (int v = 0; v < 4; ++v) {
        const __m256i bytes = v % 2 == 0 ? _mm512_castsi512_si256(pair[v / 2]) : _mm512_extracti64x4_epi64(pair[v / 2], 1);
        _mm512_store_si512(out + v * amx_tile_elems + j * 2 * 16, simd::e4m3_to_bf16(_mm512_cvtepi8_epi16(bytes), sub));
      }
    }
  }

 private:
  QPanel<fp8_format> p_;
  index_t K_;
};

/// k-blocks [kb0, kb1) of an fp8 panel of K rows in the bf16 tile layout of amx.hpp:
/// slab[kb - kb0][4 column tiles][16 k-pairs][16 columns][2] (e4m3_decoder).
inline void decode_e4m3_slab(const QPanel<fp8_format>& p, index_t K, index_t kb0, index_t kb1,
                             std::uint16_t* slab) noexcept {
  const e4m3_decoder decode(p, K);
  for (index_t kb = kb0; kb < kb1; ++kb) decode(kb, 0, amx_kb / 2, slab + (kb - kb0) * 4 * amx_tile_elems);
}

#endif

namespace detail {

#if POLYMOE_TILED_AMX_CODE
/// c[m][64] = sum over the scale groups g of the panel of (A_g · W_g) · sw[g][column] · sa[row][g]:
/// A rows [0, m) (lda elements apart, readable up to roundup(m, 16) rows) in Ops' layout (bf16_ops:
/// E4M3 values; bf16x2_ops: split rows; bf16x2_hi_ops: split rows whose lo terms are zero), W_g
/// the group's E4M3 values, sw its scales, sa the activation scales (row r's at sa[r · lds + g]; nullptr: 1). Blocks of up to 16 rows with
/// `row_group`: amx::decoded_row_group_groups (each k-block decoded between the previous one's
/// products, the four column tiles' sums flushed and scaled in per group). Others group by group:
/// decode, then (row pair, column pair) steps, each summed on the tiles from zero into a 32 x 32
/// buffer; after a step's tile instructions the core scales the previous step's buffer into c
/// while the tiles compute. (Decoding the next group a share after each step instead, into a
/// second slab, was measured and not kept: docs/decisions.md#row-group-loop.) Both sum and
/// scale in the same order: the same bits.
template <class Ops>
inline void fp8_times_panel(index_t m, const std::uint16_t* a, index_t lda, const float* sa, index_t lds, index_t K,
                            const QPanel<fp8_format>& panel, float* c, bool row_group = tuning{}.row_group) noexcept {
  const index_t nkb = padded_k32(K) / amx_kb, groups = fp8_format::groups(K);
  if (m <= 16 && row_group) {
    // amx::decoded_row_group_groups: each k-block decoded between the previous one's products,
    // the sums flushed per scale group and scaled in as scale_in below does (the same bits)
    alignas(64) float part[16 * panel_cols];
    amx::decoded_row_group_groups<Ops>(
        a, lda, nkb, e4m3_group_kb, e4m3_decoder(panel, K), part,
        [&](index_t g) {
          for (int h = 0; h < 4; ++h) {
            const __m512 sw = _mm512_load_ps(panel.scales + g * panel_cols + 16 * h);
            for (index_t r = 0; r < m; ++r) {
              const __m512 s = _mm512_mul_ps(sw, _mm512_set1_ps(sa != nullptr ? sa[r * lds + g] : 1.0f));
              const __m512 p = _mm512_load_ps(part + r * panel_cols + 16 * h);
              float* cr = c + r * panel_cols + 16 * h;
              _mm512_store_ps(cr, g == 0 ? _mm512_mul_ps(p, s) : _mm512_fmadd_ps(p, s, _mm512_load_ps(cr)));
            }
          }
        });
    return;
  }
  alignas(64) std::uint16_t slab[e4m3_group_kb * 4 * amx_tile_elems];  // 16 KiB
  alignas(64) float part[2][32 * 32];
  const auto lda_bytes = static_cast<long>(lda * 2);
  const index_t pairs = ((m + 15) / 16 + 1) / 2, steps = 2 * pairs;
  struct Step {
    index_t g = -1, r0 = 0, cp = 0;
    const float* part = nullptr;
  };
  // c[r0 + r][32cp ..] (+)= part[r][..] · sw · sa
  const auto scale_in = [&](const Step& st) {
    const float* sw = panel.scales + st.g * panel_cols + 32 * st.cp;
    const __m512 sw0 = _mm512_load_ps(sw), sw1 = _mm512_load_ps(sw + 16);
    const index_t rows = std::min<index_t>(32, m - st.r0);
    for (index_t r = 0; r < rows; ++r) {
      const __m512 f = _mm512_set1_ps(sa != nullptr ? sa[(st.r0 + r) * lds + st.g] : 1.0f);
      const float* p = st.part + r * 32;
      float* cr = c + (st.r0 + r) * panel_cols + 32 * st.cp;
      const __m512 s0 = _mm512_mul_ps(sw0, f), s1 = _mm512_mul_ps(sw1, f);
      if (st.g == 0) {
        _mm512_store_ps(cr, _mm512_mul_ps(_mm512_load_ps(p), s0));
        _mm512_store_ps(cr + 16, _mm512_mul_ps(_mm512_load_ps(p + 16), s1));
      } else {
        _mm512_store_ps(cr, _mm512_fmadd_ps(_mm512_load_ps(p), s0, _mm512_load_ps(cr)));
        _mm512_store_ps(cr + 16, _mm512_fmadd_ps(_mm512_load_ps(p + 16), s1, _mm512_load_ps(cr + 16)));
      }
    }
  };
  amx::configure();
  Step pending;
  for (index_t g = 0; g < groups; ++g) {
    const index_t kb0 = g * e4m3_group_kb, n = std::min(e4m3_group_kb, nkb - kb0);
    decode_e4m3_slab(panel, K, kb0, kb0 + n, slab);
    for (index_t i = 0; i < steps; ++i) {
      const index_t rp = i / 2, cp = i % 2, r0 = 32 * rp;
      const std::uint16_t* a0 = a + r0 * lda + kb0 * Ops::a_k;
      // during a row pair's second step: the A lines of the next row pair, or of the next group
      const std::uint16_t* pf = cp == 0           ? nullptr
                                : rp + 1 < pairs  ? a0 + 32 * lda
                                : g + 1 < groups ? a + (kb0 + e4m3_group_kb) * Ops::a_k
                                                  : nullptr;
      float* pt = part[i % 2];
      if (r0 + 16 < m)
        amx::group_step<Ops, true>(a0, a0 + 16 * lda, lda_bytes, slab, n, cp, pf, pt);
      else
        amx::group_step<Ops, false>(a0, a0, lda_bytes, slab, n, cp, pf, pt);
      if (pending.g >= 0) scale_in(pending);
      pending = {g, r0, cp, pt};
    }
  }
  if (pending.g >= 0) scale_in(pending);
}
#endif

}  // namespace detail

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_AMX_E4M3
