// kernel::tiled_amx's forward pass for E2M1 weights on the bf16 tiles: MXFP4 (quant::mxfp4: an
// E8M0 scale per 32 k) and NVFP4 (quant::nvfp4: an E4M3 scale per 16 k and an fp32 scale_2 per
// expert and projection); activations fp32 in both, bf16 (quant::mxfp4_w4a16, nvfp4_w4a16) or
// NVFP4 (quant::nvfp4_w4a4).
//
// Weights. An MXFP4 weight e2m1 · 2^(e - 127) has at most two significant bits, so it is a bf16
// value exactly whenever it is a normal number or zero: for a block whose codes are not all zero,
// scale codes 2 to 252 (mxfp4_exact_in_bf16, checked at prepare; a layer with any other scale runs
// kernel::tiled's path instead). An NVFP4 weight's e2m1 · e4m3 has at most six significant bits
// and lies in [2^-10, 2688]: always a normal bf16 value or zero. Its scale_2 multiplies the
// panel's sums after the tiles (the reference rounds (e2m1 · e4m3) · scale_2 once per weight
// instead: 2^-24 relative apart). The panels keep kernel::tiled's layout (qpanel.hpp: the
// checkpoint's nibbles, 4.25 or 4.5 bits a weight), decoded into amx.hpp's bf16 tile layout in L1
// as the tiles need them (mxfp4_decoder: a 32-entry vpermw table of the E2M1 values; nvfp4_decoder:
// a 64-entry table of E2M1 magnitude times scale mantissa, then the code's sign set; in both the
// scale's exponent is added to the nonzero magnitudes by one unsigned saturating subtraction from
// biased table entries, which leaves the zeros zero). A block of up to 16
// rows decodes each k-block in four parts between the previous k-block's products
// (amx::decoded_row_group: the decode and the tiles overlap); a larger block decodes a 32 KiB slab
// (8 k-blocks), and its tiles run over it before the next slab is decoded.
//
// Activations. The weight-only schemes keep their activations in fp32 (W4A32), and tdpbf16ps
// multiplies bf16. Each input row enters the tiles as two bf16 terms, x = hi + lo with hi =
// bf16(x) and lo = bf16(x - hi) (split_bf16_row), which leaves |x - hi - lo| <= 2^-17 |x| (less
// than the fp32 reference's own rounding over a few dozen terms of its sums); both terms multiply
// the same decoded B tiles (amx::bf16x2_ops), so the tiles do twice bf16's work per weight. Rows
// that are bf16 values already (an engine's bf16 hidden states) have lo = 0 throughout: a GEMM 1
// block whose rows all are runs the hi terms alone (amx::bf16x2_hi_ops; amx_decoded.hpp), which
// gives the same bits with bf16's work. The W4A16 schemes round both GEMMs' rows to bf16 (their
// quantize_activation): one term throughout (amx::bf16_ops), bf16's tile work per weight.
// Products of bf16 values are exact in fp32; the tiles sum them in fp32, in their own order, and
// treat subnormal inputs (below 2^-126) as zero. NVFP4 W4A4 quantizes each row as the scheme does
// (act_quant.hpp) and enters it as its e2m1 · e4m3 values, exact in bf16, in one term
// (amx::bf16_ops: bf16's work per weight); the row's scale_2 multiplies its sums after the tiles.
//
// Blocks of fewer rows than the format's threshold (decode; amx_min_rows_e2m1 for MXFP4,
// amx_min_rows_nvfp4, amx_min_rows_nvfp4_w4a4, and the W4A16 ones below) run kernel::tiled's path
// for the format on the fp32 rows (qpanel.hpp), as does every block without AMX. The forward pass
// is amx_decoded.hpp's, shared with the E4M3 formats.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_AMX_E2M1) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_AMX_E2M1
#undef POLYMOE_TILED_GUARD_AMX_E2M1
#else
#define POLYMOE_TILED_GUARD_AMX_E2M1
#endif
#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <polymoe/codecs/bf16.hpp>
#include <polymoe/codecs/e2m1.hpp>
#include <polymoe/kernels/tiled/amx.hpp>
#include <polymoe/kernels/tiled/forward.hpp>
#include <polymoe/kernels/tiled/qpanel.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

/// Rows per block from which MXFP4 blocks run the tiles (below: kernel::tiled's path; 1-2 rows its
/// decode loop). Measured on the 16-core device machine (docs/decisions.md#amx-min-rows-e2m1; 16
/// threads, two rounds of the knob at 4, 8, 16 and never), time over the time with 4: about 4 rows
/// per expert (GPT-OSS-20B T=32, Qwen3-30B-A3B T=64), the FMA path 1.02-1.26; about 8 (T=64,
/// T=128), 8 rows 1.03-1.21 and the FMA path 1.25-1.59; about 16, the FMA path 1.57-1.67 (the
/// threshold was 4). Since kernel::tiled runs blocks of 3-4 rows in registers (qtile),
/// bench_amx --threshold mxfp4 (16 threads, K = 2048, 5 paired rounds) gives kernel::tiled's time
/// over the tiles' (amx::decoded_row_group) at 3 rows 0.68, at 4 rows 0.76, at 6 rows 1.44 (medians).
/// tuning::amx_min_rows overrides it, as it does bf16's and int8's.
inline constexpr index_t amx_min_rows_e2m1 = 5;

/// The same for NVFP4, whose decode costs more per weight (a 64-entry table, and the scale's
/// mantissa in each index). Measured with bench_amx --threshold (16 threads, K = 2048 and 768,
/// paired rounds; docs/decisions.md#amx-min-rows-e2m1): with the slab loop, time of
/// kernel::tiled's path over the tiles' at 4 rows 0.80-1.04, at 6 rows 0.98-1.21 (the threshold
/// was 6); with the row-group loop (amx::decoded_row_group), in two measurements, at 3 rows 0.94
/// and 0.90, at 4 rows 1.31 and 1.04 (medians), at 6 rows 1.16 and 1.02, at 8 rows 1.30 and 1.37;
/// with kernel::tiled's blocks of 3-4 rows in registers (qtile), at 3 rows 0.59, at 4 rows 0.68,
/// at 6 rows 0.93, at 8 rows 1.41.
inline constexpr index_t amx_min_rows_nvfp4 = 5;

/// The same for NVFP4 W4A4 (quant::nvfp4_w4a4), whose rows enter the tiles as one bf16 term, not
/// two: half the tiles' work per weight beside the same decode. Measured with bench_amx --threshold
/// nvfp4_w4a4 (16 threads, K = 2048, paired rounds; docs/decisions.md#amx-min-rows-e2m1): with
/// the slab loop, time of kernel::tiled's path over the tiles' at 2 rows 0.42-0.44, at 3 rows
/// 1.05-1.12, at 4 rows 1.07-1.16 (quartiles; the threshold was 4); with the row-group loop, in two
/// measurements, at 2 rows 0.53 and 0.52, at 3 rows 1.67 and 1.46, at 4 rows 1.45 and 1.12
/// (medians); with kernel::tiled's blocks of 3-4 rows in registers (qtile), at 3 rows 0.58, at 4
/// rows 0.74, at 6 rows 1.25.
inline constexpr index_t amx_min_rows_nvfp4_w4a4 = 5;

/// The same for W4A16 (quant::mxfp4_w4a16, nvfp4_w4a16), whose rows enter the tiles as one bf16
/// term in both GEMMs. bench_amx --threshold mxfp4_bf16 / nvfp4_bf16 (rows of bf16 values on the
/// tiles' one-term loop against kernel::tiled's path; 16 threads, K = 2048, 5 paired rounds, two
/// measurements; docs/decisions.md#amx-min-rows-w4a16), kernel::tiled's time over the tiles',
/// medians: MXFP4 at 2 rows 0.87 (the second), at 3 rows 1.17 and 1.30, at 4 rows 1.12 and 1.57;
/// NVFP4 at 3 rows 0.75 and 1.05, at 4 rows 1.06 and 1.22, at 6 rows 1.45 and 1.62.
inline constexpr index_t amx_min_rows_e2m1_w4a16 = 3;
inline constexpr index_t amx_min_rows_nvfp4_w4a16 = 4;

/// Whether every MXFP4 weight of `blocks` (16 bytes of E2M1 codes per block of 32) and `scales`
/// (one E8M0 code per block) is exact in bf16 and not subnormal: a block with a nonzero code has
/// its scale code in [2, 252] (0.5 · 2^(2 - 127) = 2^-126, the smallest normal; 6 · 2^(252 - 127)
/// still under 2^128).
[[nodiscard]] inline bool mxfp4_exact_in_bf16(const std::vector<std::uint8_t>& blocks,
                                              const std::vector<std::uint8_t>& scales) noexcept {
  for (std::size_t i = 0; i < scales.size(); ++i) {
    if (scales[i] >= 2 && scales[i] <= 252) continue;
    for (std::size_t j = 0; j < 16; ++j)
      if ((blocks[16 * i + j] & 0x77u) != 0) return false;  // a magnitude bit in either nibble
  }
  return true;
}

/// Whether nvfp4_decoder can decode NVFP4 block scales `scales` (E4M3 codes): none has its
/// sign bit set. ModelOpt's scales are amax / 6 / scale_2, never negative; a layer with a negative
/// one (or -0) runs kernel::tiled's path instead.
[[nodiscard]] inline bool nvfp4_scales_unsigned(const std::vector<std::uint8_t>& scales) noexcept {
  return std::none_of(scales.begin(), scales.end(), [](std::uint8_t s) { return (s & 0x80u) != 0; });
}

#if POLYMOE_TILED_AVX512

/// dst = the k-blocks of src[0..n) · wt as split rows: per k-block of 32, hi[32] then lo[32]
/// (hi = bf16(x), lo = bf16(x - hi); an infinite x gets lo = 0), zeros from n to n32 (a multiple
/// of 16; k-blocks past the last written one are not touched). Returns whether every lo is zero
/// (every value a bf16 value: amx::bf16x2_hi_ops may run the row).
inline bool split_bf16_row(const float* src, float wt, index_t n, index_t n32, std::uint16_t* dst) noexcept {
  const __m512 w = _mm512_set1_ps(wt);
  __m256i lo_bits = _mm256_setzero_si256();
  for (index_t k = 0; k < n32; k += 16) {
    const __mmask16 m = k + 16 <= n ? __mmask16(0xFFFF) : k < n ? __mmask16((1u << (n - k)) - 1) : __mmask16(0);
    const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, src + k), w);
    __m512 hi, lo;
    simd::split_bf16(x, hi, lo);
    std::uint16_t* d = dst + (k / amx_kb) * 2 * amx_kb + k % amx_kb;
    const __m256i lo16 = simd::bf16_bits(lo);
    lo_bits = _mm256_or_si256(lo_bits, lo16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), simd::bf16_bits(hi));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + amx_kb), lo16);
  }
  return _mm256_testz_si256(lo_bits, lo_bits) != 0;
}

/// Decodes an MXFP4 panel of K rows into amx.hpp's bf16 tile layout, a k-block or part of one per
/// call: each weight e2m1 · 2^(e - 127) as bf16 bits (exact where mxfp4_exact_in_bf16 holds; both
/// zeros as +0, which gives the tiles' sums the same bits: they start from +0), rows k >= K zero.
/// Per k-pair and column tile: the two k-rows' bytes interleaved and widened to words (load_kpair),
/// then one vpermw and one vpsubusw. The table holds sign | (magnitude + bias) for each nonzero
/// E2M1 value and 0 for both zeros; per column, sub = bias - (e - 127) << 7, which lies in [0, 2^15)
/// for e in [2, 252]; the unsigned saturating difference table[c] - sub is then sign | (magnitude
/// + (e - 127) << 7) for a nonzero code (no borrow leaves the magnitude: the result is the normal
/// bf16 value) and 0 for a zero one whatever the scale. (The masked add of (e - 127) << 7 to the
/// nonzero codes that it replaced, a test and a masked add, ran 2-14 % slower in the forward on
/// GPT-OSS-20B's shape; docs/decisions.md#e2m1-decode.) vpermw reads index bits 0-4, so the table
/// repeats at 16 and the low nibble's word needs no mask.
class mxfp4_decoder {
 public:
  mxfp4_decoder(const QPanel<mxfp4_format>& p, index_t K) noexcept : p_(p), K_(K) {}

  /// k-pairs [j0, j1) of k-block kb into the k-block's four column tiles at out
  /// ([4][16 k-pairs][16 columns][2]).
  void operator()(index_t kb, index_t j0, index_t j1, std::uint16_t* out) noexcept {
    static constexpr auto table = [] {
      std::array<std::uint16_t, 32> t{};
      for (std::size_t i = 0; i < 32; ++i) {
        const std::uint16_t b = detail::e2m1_bf16_table[i];
        t[i] = (b & 0x7FFF) == 0 ? std::uint16_t{0} : static_cast<std::uint16_t>((b & 0x8000) | ((b & 0x7FFF) + bias));
      }
      return t;
    }();
    if (kb != kb_) {  // per column tile: bias + 127 << 7 - e << 7 in both words of each column's pair
      const __m512i top = _mm512_set1_epi16(static_cast<short>(bias + (127 << 7)));
      for (int v = 0; v < 4; ++v) {
        const __m512i e = simd::widen16(p_.scales + kb * panel_cols + 16 * v);
        sub_[v] = _mm512_sub_epi16(top, _mm512_slli_epi16(_mm512_or_si512(e, _mm512_slli_epi32(e, 16)), 7));
      }
      kb_ = kb;
    }
    const __m512i lut = _mm512_loadu_si512(table.data());
    for (index_t j = j0; j < j1; ++j) {
      __m512i half[2];
      detail::load_kpair(p_.codes, kb * amx_kb + 2 * j, K_, half);
      for (int v = 0; v < 4; ++v) {
        const __m512i code = v % 2 == 0 ? half[v / 2] : _mm512_srli_epi16(half[v / 2], 4);
        const __m512i w = _mm512_subs_epu16(_mm512_permutexvar_epi16(code, lut), sub_[v]);
        _mm512_store_si512(out + v * amx_tile_elems + j * 2 * 16, w);
      }
    }
  }

 private:
  static constexpr std::uint16_t bias = 16064;  // in [125 << 7, 0x7FFF - bf16(6)] = [16000, 16191]
  QPanel<mxfp4_format> p_;
  index_t K_;
  index_t kb_ = -1;  // the k-block whose scales sub_ holds
  __m512i sub_[4];
};

/// Decodes an NVFP4 panel of K rows as mxfp4_decoder: each weight e2m1 · e4m3 (the block scale;
/// scale_2 is left to the caller) as bf16 bits, exact, rows k >= K zero; block scales without the
/// sign bit (nvfp4_scales_unsigned). Per scale group of 16 k and column, the scale as fp32 2^E ·
/// (1 + m/8) gives a table index m << 3 and sub = bias - (E - 127) << 7 (0xFFFF for a zero scale,
/// whose weights are ±0); per weight, a 64-entry table (vpermt2w) of the bf16 bits of e2m1
/// magnitude · (1 + m/8) plus bias (0 for a zero magnitude), the unsigned saturating difference
/// with sub (mxfp4_decoder's way of adding the exponent offset to the nonzero magnitudes only;
/// E lies in [118, 135]), and the code's sign set.
class nvfp4_decoder {
 public:
  nvfp4_decoder(const QPanel<nvfp4_format>& p, index_t K) noexcept : p_(p), K_(K), groups_(nvfp4_format::groups(K)) {}

  /// k-pairs [j0, j1) of k-block kb into the k-block's four column tiles at out.
  void operator()(index_t kb, index_t j0, index_t j1, std::uint16_t* out) noexcept {
    static_assert(nvfp4_format::group * 2 == amx_kb, "two scale groups per k-block");
    static constexpr auto table = [] {  // e2m1 magnitude c times (1 + m/8) at 8m + c, plus bias; 0 for c = 0
      std::array<std::uint16_t, 64> t{};
      for (int m = 0; m < 8; ++m)
        for (int c = 1; c < 8; ++c)
          t[static_cast<std::size_t>(8 * m + c)] = static_cast<std::uint16_t>(
              codecs::float_to_bf16(codecs::e2m1_values[c] * (1.0f + static_cast<float>(m) / 8.0f)) + bias);
      return t;
    }();
    const __m512i t0 = _mm512_loadu_si512(table.data()), t1 = _mm512_loadu_si512(table.data() + 32);
    const __m512i seven = _mm512_set1_epi16(7), sign = _mm512_set1_epi16(static_cast<short>(0x8000));
    for (index_t j = j0; j < j1; ++j) {
      const index_t k = kb * amx_kb + 2 * j;
      if (const index_t g = k / nvfp4_format::group; g != g_) load_group(g);
      __m512i half[2];
      detail::load_kpair(p_.codes, k, K_, half);
      for (int v = 0; v < 4; ++v) {
        // the nibble in bits 0-3 (bits 4-7 of the low nibble's word: the other nibble, unused)
        const __m512i code = v % 2 == 0 ? half[v / 2] : _mm512_srli_epi16(half[v / 2], 4);
        const __m512i idx = _mm512_ternarylogic_epi32(code, seven, mant_[v], 0xEA);  // (code & 7) | mant
        __m512i w = _mm512_subs_epu16(_mm512_permutex2var_epi16(t0, idx, t1), sub_[v]);
        w = _mm512_ternarylogic_epi32(w, _mm512_slli_epi16(code, 12), sign, 0xF8);  // w | (code << 12 & sign)
        _mm512_store_si512(out + v * amx_tile_elems + j * 2 * 16, w);
      }
    }
  }

 private:
  static constexpr std::uint16_t bias = 8192;  // over 9 << 7, under 0x7FFF - bf16(6 · 1.875)

  // per column tile, both words of each column's k-pair: table index bits 3-5 (mant_), and sub_:
  // bias - (E - 127) << 7, or 0xFFFF where the scale is zero
  void load_group(index_t g) noexcept {
    const auto both_words = [](__m512i x) { return _mm512_or_si512(x, _mm512_slli_epi32(x, 16)); };
    g_ = g;
    for (int v = 0; v < 4; ++v) {
      if (g >= groups_) {  // rows past K: codes zero
        mant_[v] = _mm512_setzero_si512();
        sub_[v] = _mm512_set1_epi16(-1);
        continue;
      }
      const __m512i s = _mm512_castps_si512(simd::e4m3_to_ps(simd::widen16(p_.scales + g * panel_cols + 16 * v)));
      const __m512i e = _mm512_sub_epi32(_mm512_srli_epi32(s, 23), _mm512_set1_epi32(127));
      const __m512i ones = _mm512_set1_epi32(0xFFFF);
      mant_[v] = both_words(_mm512_and_si512(_mm512_srli_epi32(s, 17), _mm512_set1_epi32(0x38)));
      sub_[v] = both_words(_mm512_mask_and_epi32(ones, _mm512_test_epi32_mask(s, s),
                                                 _mm512_sub_epi32(_mm512_set1_epi32(bias), _mm512_slli_epi32(e, 7)), ones));
    }
  }

  QPanel<nvfp4_format> p_;
  index_t K_, groups_;
  index_t g_ = -1;  // the scale group whose state mant_ and sub_ hold
  __m512i mant_[4], sub_[4];
};

/// The decoder of an E2M1 format.
template <class F>
using e2m1_decoder = std::conditional_t<F::scale == qscale::e8m0, mxfp4_decoder, nvfp4_decoder>;

/// k-blocks [kb0, kb1) of an E2M1 panel (MXFP4 or NVFP4) of K rows in the bf16 tile layout of
/// amx.hpp: slab[kb - kb0][4 column tiles][16 k-pairs][16 columns][2] (e2m1_decoder).
template <class F>
inline void decode_e2m1_slab(const QPanel<F>& p, index_t K, index_t kb0, index_t kb1, std::uint16_t* slab) noexcept {
  e2m1_decoder<F> decode(p, K);
  for (index_t kb = kb0; kb < kb1; ++kb) decode(kb, 0, amx_kb / 2, slab + (kb - kb0) * 4 * amx_tile_elems);
}

#endif

namespace detail {

#if POLYMOE_TILED_AMX_CODE
/// c[m][64] = rows [0, m) of A in Ops' layout (bf16x2_ops: split rows; bf16x2_hi_ops: split rows
/// whose lo terms are zero; bf16_ops: NVFP4 W4A4's e2m1 · e4m3 values), lda elements apart and
/// readable up to roundup(m, 16) rows, times an E2M1 panel (MXFP4 or NVFP4) of K rows; NVFP4's scale_2 and the rows' scales sa (row r's at sa[r];
/// nullptr: 1) multiply the sums. Blocks of up to 16 rows run amx::decoded_row_group (the decode
/// of each k-block between the previous one's products) when `row_group` (tuning::row_group), others
/// a decoded 32 KiB slab at a time (amx::decoded_slab); both sum each column tile in the same order,
/// so they give the same bits.
template <class F, class Ops = amx::bf16x2_ops>
inline void e2m1_block_times_panel(index_t m, const std::uint16_t* a, index_t lda, const float* sa, index_t K,
                                   const QPanel<F>& panel, float* c, bool row_group = tuning{}.row_group) noexcept {
  static_assert(F::code == qcode::e2m1);
  const index_t nkb = padded_k32(K) / amx_kb;
  if (m <= 16 && row_group) {
    amx::decoded_row_group<Ops>(a, lda, nkb, e2m1_decoder<F>(panel, K), c);
  } else {
    alignas(64) std::uint16_t slab[amx::slab_kb * 4 * amx_tile_elems];  // 32 KiB
    for (index_t s0 = 0; s0 < nkb; s0 += amx::slab_kb) {
      const index_t s1 = std::min(nkb, s0 + amx::slab_kb);
      decode_e2m1_slab(panel, K, s0, s1, slab);
      amx::decoded_slab<Ops>(a + s0 * Ops::a_k, lda, m, s1 - s0, slab, c, s0 > 0);
    }
  }
  if (F::scale == qscale::e4m3 || sa != nullptr)
    for (index_t r = 0; r < m; ++r) {
      const __m512 g = _mm512_set1_ps(panel.global * (sa != nullptr ? sa[r] : 1.0f));
      for (index_t i = r * panel_cols; i < (r + 1) * panel_cols; i += 16)
        _mm512_store_ps(c + i, _mm512_mul_ps(_mm512_load_ps(c + i), g));
    }
}
#endif

#if POLYMOE_TILED_AVX512
/// GEMM 1's epilogue for the split-row paths (MXFP4, fp8 weight-only): rows [0, b.rows) of panel
/// cb's c[m][64], plus bias, activated and written as split rows into GEMM 2's input (row stride
/// ldi elements; columns [I, I32) zero).
inline void split_finish13(const ExpertMlp& mlp, const PanelGrid& pk, const RowBlock& b, index_t cb, float* c,
                           std::uint16_t* h16, index_t ldi) noexcept {
  const ExpertShape& s = pk.shape;
  const index_t I = s.intermediate, I32 = padded_k32(I), act_cols = pk.act_cols();
  const float* bias = pk.bias13(b.expert, cb);
  const index_t j0 = cb * act_cols, n = std::min(act_cols, I - j0), n32 = std::min(act_cols, I32 - j0);
  alignas(64) float h[panel_cols];
  for (index_t i = 0; i < b.rows; ++i) {
    float* ci = c + i * panel_cols;
    add_row(ci, bias, 1.0f, ci, panel_cols);
    activate<false>(mlp.activation, ci, s.gated ? ci + panel_cols / 2 : nullptr, h, n);
    split_bf16_row(h, 1.0f, n, n32, h16 + (b.begin + i) * ldi + 2 * j0);
  }
}
#endif

}  // namespace detail

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_AMX_E2M1
