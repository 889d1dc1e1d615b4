// Quantized panels: the tiled kernel's layout for E4M3 (fp8) and E2M1 (MXFP4, NVFP4) weights.
//
// The panel grid is the one of prepack.hpp (64 output columns per panel, gate and up halves side
// by side), but a k-row keeps the checkpoint's codes: 64 bytes of E4M3, or 32 bytes of E2M1
// nibbles. Scales are stored per panel, per group of G consecutive k, per column: [K/G][64] —
// fp32 for fp8 (G = 128: DeepSeek-V3's blocks; a per-tensor scale is repeated), E8M0 codes for
// MXFP4 (G = 32), E4M3 codes for NVFP4 (G = 16, with the fp32 weight_scale_2 of the expert and
// projection kept beside the panel). No dequantized copy of the weights exists in memory:
//
//   decode (one or two rows per expert): each k-row is widened to four fp32 vectors in registers
//     (E2M1: a 16-entry lookup with vpermps on the nibble; E4M3: shifts into the fp32 bit
//     pattern and one exact multiply by 2^120), the products summed over the scale group and
//     the group's sum multiplied by its scales; on E2M1 panels, where vdpbf16ps is chosen, as
//     bf16 pairs instead (decode_qtile_bf16: a k-pair a vpermw per 16 columns; fp32 rows as two
//     bf16 terms, rows of bf16 values (W4A16) as one);
//   three or four rows (qtile): the same widening, scaled per weight, in registers, each k-row
//     against every row of the block;
//   prefill: the same widening writes a 32 KiB slab of the panel into an L1 buffer once per row
//     block, and the fp32 micro-kernel runs all the block's tiles over it.
//
// Outside decode, the widened weight is exactly the scheme's dequantized value, computed in the
// same order as the quant policies' dequantize (e4m3 · s; e2m1 · 2^e; (e2m1 · e4m3) · scale_2), so
// the tiled kernel differs from the reference only in the order of the sums; decode rounds each
// group's scaled sum once instead of each weight (decode_qtile).
//
// E2M1 k-row layout: byte j of half h (j < 16, h < 2) holds column 32h + j in its low nibble and
// column 32h + 16 + j in its high nibble, so one byte-to-dword widening of 16 bytes serves two
// vectors (the nibble itself, and the byte shifted right by 4: vpermps reads only the index's low
// four bits).
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_QPANEL) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_QPANEL
#undef POLYMOE_TILED_GUARD_QPANEL
#else
#define POLYMOE_TILED_GUARD_QPANEL
#endif
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include <polymoe/kernels/parallel.hpp>

#include <polymoe/codecs/bf16.hpp>
#include <polymoe/codecs/e2m1.hpp>
#include <polymoe/codecs/e4m3.hpp>
#include <polymoe/codecs/e8m0.hpp>
#include <polymoe/kernels/tiled/epilogue.hpp>
#include <polymoe/kernels/tiled/microkernel.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

enum class qcode { e4m3, e2m1 };        ///< how one weight is coded
enum class qscale { f32, e8m0, e4m3 };  ///< how a group's scale is coded

/// A quantized weight format: element code, scale code and k per scale group.
template <qcode C, qscale S, index_t G>
struct qformat {
  static constexpr qcode code = C;
  static constexpr qscale scale = S;
  static constexpr index_t group = G;
  static constexpr index_t row_bytes = C == qcode::e4m3 ? panel_cols : panel_cols / 2;
  using scale_type = std::conditional_t<S == qscale::f32, float, std::uint8_t>;

  /// Scale groups of a reduction of length K.
  [[nodiscard]] static constexpr index_t groups(index_t K) noexcept { return (K + G - 1) / G; }
};

using fp8_format = qformat<qcode::e4m3, qscale::f32, 128>;
using mxfp4_format = qformat<qcode::e2m1, qscale::e8m0, 32>;
using nvfp4_format = qformat<qcode::e2m1, qscale::e4m3, 16>;

/// One quantized panel: codes [K][row_bytes], scales [groups(K)][64], and the factor applied after
/// the group scale (NVFP4's weight_scale_2; 1 otherwise).
template <class F>
struct QPanel {
  const std::uint8_t* codes;
  const typename F::scale_type* scales;
  float global;
};

/// All experts' quantized weights of one layer.
template <class F>
struct QPackedExperts : PanelGrid {
  using format = F;
  AlignedBuffer<std::uint8_t> w13, w2;               ///< [E][panels][K][row_bytes]
  AlignedBuffer<typename F::scale_type> s13, s2;     ///< [E][panels][groups(K)][64]
  std::vector<float> g13, g2;                        ///< [E]
  bool use_amx = false;    ///< tiled_amx (MXFP4): run the tiles (decided at prepare; amx_e2m1.hpp)
  bool pipelined = false;  ///< tiled_amx: the GEMMs as one pipeline (detail::pipelined_tasks)

  [[nodiscard]] QPanel<F> panel13(index_t e, index_t cb) const noexcept {
    const index_t H = shape.hidden, i = e * panels13 + cb;
    return {w13.data() + i * H * F::row_bytes, s13.data() + i * F::groups(H) * panel_cols,
            g13[static_cast<std::size_t>(e)]};
  }
  [[nodiscard]] QPanel<F> panel2(index_t e, index_t cb) const noexcept {
    const index_t I = shape.intermediate, i = e * panels2 + cb;
    return {w2.data() + i * I * F::row_bytes, s2.data() + i * F::groups(I) * panel_cols,
            g2[static_cast<std::size_t>(e)]};
  }
  /// Bytes of one expert's packed weights and scales (what a decode step streams per expert used).
  [[nodiscard]] index_t expert_bytes() const noexcept {
    const index_t H = shape.hidden, I = shape.intermediate, sb = sizeof(typename F::scale_type);
    return panels13 * (H * F::row_bytes + F::groups(H) * panel_cols * sb) +
           panels2 * (I * F::row_bytes + F::groups(I) * panel_cols * sb);
  }
};

/// Where column c of a panel lives in a k-row: byte, and shift of its code in that byte.
template <class F>
[[nodiscard]] constexpr std::pair<index_t, int> code_position(index_t c) noexcept {
  if constexpr (F::code == qcode::e4m3) {
    return {c, 0};
  } else {
    return {(c / 32) * 16 + c % 16, (c % 32) >= 16 ? 4 : 0};
  }
}

/// Packs quantized weights from the scheme's own storage. code13(e, r, k) is the code (a byte, or a
/// nibble in its low four bits) of canonical w13 row r, column k of expert e; scale13(e, r, g) the
/// scale of row r's group g; global13 [E] the factor after it (NVFP4), likewise for w2;
/// `huge_pages`: as AlignedBuffer's (tuning::huge_pages).
template <class F, class C13, class S13, class C2, class S2, class B13, class B2>
QPackedExperts<F> pack_quantized(const ExpertShape& s, C13 code13, S13 scale13, std::vector<float> global13, C2 code2,
                                 S2 scale2, std::vector<float> global2, B13 b13, B2 b2, bool huge_pages = true) {
  QPackedExperts<F> p;
  p.init(s, b13, b2, huge_pages);
  const index_t E = s.experts, H = s.hidden, I = s.intermediate;
  const auto n = [](index_t v) { return static_cast<std::size_t>(v); };
  p.w13 = AlignedBuffer<std::uint8_t>(n(E * p.panels13 * H * F::row_bytes), huge_pages);
  p.w2 = AlignedBuffer<std::uint8_t>(n(E * p.panels2 * I * F::row_bytes), huge_pages);
  p.s13 = AlignedBuffer<typename F::scale_type>(n(E * p.panels13 * F::groups(H) * panel_cols), huge_pages);
  p.s2 = AlignedBuffer<typename F::scale_type>(n(E * p.panels2 * F::groups(I) * panel_cols), huge_pages);
  p.g13 = std::move(global13);
  p.g2 = std::move(global2);
  const auto fill = [&](std::uint8_t* codes, typename F::scale_type* scales, index_t K, index_t c, auto code,
                        auto scale) {
    const auto [byte, shift] = code_position<F>(c);
    for (index_t k = 0; k < K; ++k)
      codes[k * F::row_bytes + byte] |= static_cast<std::uint8_t>((code(k) & (shift ? 0xF : 0xFF)) << shift);
    for (index_t g = 0; g < F::groups(K); ++g) scales[g * panel_cols + c] = scale(g);
  };
  kernels::parallel_for(index_t{0}, E, [&](index_t e) {
    for (index_t cb = 0; cb < p.panels13; ++cb) {
      const index_t i = e * p.panels13 + cb;
      for (index_t c = 0; c < panel_cols; ++c)
        if (const index_t r = p.row13(cb, c); r >= 0)
          fill(p.w13.data() + i * H * F::row_bytes, p.s13.data() + i * F::groups(H) * panel_cols, H, c,
               [&](index_t k) { return code13(e, r, k); }, [&](index_t g) { return scale13(e, r, g); });
    }
    for (index_t cb = 0; cb < p.panels2; ++cb) {
      const index_t i = e * p.panels2 + cb;
      for (index_t c = 0; c < panel_cols; ++c)
        if (const index_t r = p.row2(cb, c); r >= 0)
          fill(p.w2.data() + i * I * F::row_bytes, p.s2.data() + i * F::groups(I) * panel_cols, I, c,
               [&](index_t k) { return code2(e, r, k); }, [&](index_t g) { return scale2(e, r, g); });
    }
  });
  return p;
}

#if POLYMOE_TILED_AVX512

// GCC 12 reports the deliberately undefined pass-through operand of the masked builtins behind
// _mm512_cvtepu8_epi32 / _mm512_permutexvar_ps as "used uninitialized" once they are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace simd {

/// E4M3 codes (one per 32-bit lane, no NaN codes) to fp32, exactly: sign to bit 31, exponent and
/// mantissa to bits 26..20, then · 2^120 (re-biases 7 -> 127; subnormal codes land on fp32
/// subnormals, which the multiply scales exactly).
inline __m512 e4m3_to_ps(__m512i c) noexcept {
  __m512i t = _mm512_srai_epi32(_mm512_slli_epi32(c, 24), 4);
  t = _mm512_and_si512(t, _mm512_set1_epi32(static_cast<int>(0x87F00000u)));
  return _mm512_mul_ps(_mm512_castsi512_ps(t), _mm512_set1_ps(0x1p120f));
}

inline __m512i widen16(const std::uint8_t* p) noexcept {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

}  // namespace simd

namespace detail {

/// The 16 E2M1 codes' values as bf16 bits, twice: vpermw reads index bits 0-4, so a table of 32
/// words serves the codes in the low 4 bits of each index whatever bit 4 is.
inline constexpr std::array<std::uint16_t, 32> e2m1_bf16_table = [] {
  std::array<std::uint16_t, 32> t{};
  for (std::uint8_t i = 0; i < 32; ++i) t[i] = codecs::float_to_bf16(codecs::e2m1_to_float(static_cast<std::uint8_t>(i & 15)));
  return t;
}();

/// The E2M1 codes of k-rows k and k + 1 of a panel (rows from K on read as zero), interleaved for
/// the tile layout: half[h] holds bytes 16h .. 16h + 15 of both rows, (row k, row k + 1) per
/// column byte, one byte per word. Prefetches the codes Ahead bytes ahead. Two 32-byte loads, two
/// unpacks, two lane moves and two widenings (load_kpair_vbmi does it in one load and two vpermb).
template <index_t Ahead = 2048>
inline void load_kpair_shuffled(const std::uint8_t* codes, index_t k, index_t K, __m512i (&half)[2]) noexcept {
  constexpr index_t row_bytes = panel_cols / 2;  // 64 nibbles
  const std::uint8_t* row = codes + k * row_bytes;
  _mm_prefetch(reinterpret_cast<const char*>(row) + Ahead, _MM_HINT_T0);
  const __m256i r0 = k < K ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row)) : _mm256_setzero_si256();
  const __m256i r1 =
      k + 1 < K ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + row_bytes)) : _mm256_setzero_si256();
  const __m256i lo = _mm256_unpacklo_epi8(r0, r1), hi = _mm256_unpackhi_epi8(r0, r1);
  half[0] = _mm512_cvtepu8_epi16(_mm256_permute2x128_si256(lo, hi, 0x20));
  half[1] = _mm512_cvtepu8_epi16(_mm256_permute2x128_si256(lo, hi, 0x31));
}

#if POLYMOE_TILED_ISA_VBMI
/// load_kpair_shuffled's words from one 64-byte load of both rows (row k + 1 masked off past K) and
/// two zero-masked vpermb.
template <index_t Ahead = 2048>
inline void load_kpair_vbmi(const std::uint8_t* codes, index_t k, index_t K, __m512i (&half)[2]) noexcept {
  constexpr index_t row_bytes = panel_cols / 2;
  const std::uint8_t* row = codes + k * row_bytes;
  _mm_prefetch(reinterpret_cast<const char*>(row) + Ahead, _MM_HINT_T0);
  const __m512i both = k + 1 < K ? _mm512_loadu_si512(row)
                       : k < K   ? _mm512_maskz_loadu_epi8(0xFFFFFFFFull, row)
                                 : _mm512_setzero_si512();
  // the low byte of word w of half h: byte 16h + w / 2 of row k + (w & 1)
  static constexpr auto index = [] {
    std::array<std::uint8_t, 128> t{};
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 32; ++w)
        t[static_cast<std::size_t>(64 * h + 2 * w)] = static_cast<std::uint8_t>((w & 1) * row_bytes + 16 * h + w / 2);
    return t;
  }();
  constexpr __mmask64 low_bytes = 0x5555555555555555ull;
  half[0] = _mm512_maskz_permutexvar_epi8(low_bytes, _mm512_loadu_si512(index.data()), both);
  half[1] = _mm512_maskz_permutexvar_epi8(low_bytes, _mm512_loadu_si512(index.data() + 64), both);
}
#endif

/// The decoders' k-pair load: load_kpair_vbmi where the build targets AVX512-VBMI (every AMX CPU
/// has it), else load_kpair_shuffled. The VBMI load took the decode alone from about 230 to 155-183
/// ns per k-block per thread at 16 threads on the device machine (docs/decisions.md#e2m1-decode).
/// Ahead: bytes of codes prefetched ahead of row k (the tiles' decoders: 2 KiB).
template <index_t Ahead = 2048>
inline void load_kpair(const std::uint8_t* codes, index_t k, index_t K, __m512i (&half)[2]) noexcept {
#if POLYMOE_TILED_ISA_VBMI
  load_kpair_vbmi<Ahead>(codes, k, K, half);
#else
  load_kpair_shuffled<Ahead>(codes, k, K, half);
#endif
}

}  // namespace detail

/// The scales of group g of a panel, as four fp32 vectors.
template <class F>
inline void load_group_scales(const QPanel<F>& p, index_t g, __m512 (&s)[4]) noexcept {
  const auto* sg = p.scales + g * panel_cols;
  for (int v = 0; v < 4; ++v) {
    if constexpr (F::scale == qscale::f32) {
      s[v] = _mm512_load_ps(sg + 16 * v);
    } else if constexpr (F::scale == qscale::e8m0) {  // 2^(code - 127), subnormal 2^-127 included
      const __m512i e = _mm512_sub_epi32(simd::widen16(sg + 16 * v), _mm512_set1_epi32(127));
      s[v] = _mm512_scalef_ps(_mm512_set1_ps(1.0f), _mm512_cvtepi32_ps(e));
    } else {
      s[v] = simd::e4m3_to_ps(simd::widen16(sg + 16 * v));
    }
  }
}

/// The E2M1 values of k-row k, unscaled (the group scale is applied to the group's sum).
template <class F>
inline void load_e2m1_row(const QPanel<F>& p, index_t k, __m512 (&w)[4]) noexcept {
  constexpr const float* e = codecs::e2m1_values;
  const __m512 lut = _mm512_setr_ps(e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7], -e[0], -e[1], -e[2], -e[3],
                                    -e[4], -e[5], -e[6], -e[7]);
  const std::uint8_t* row = p.codes + k * F::row_bytes;
  for (int h = 0; h < 2; ++h) {
    const __m512i c = simd::widen16(row + 16 * h);
    w[2 * h] = _mm512_permutexvar_ps(c, lut);
    w[2 * h + 1] = _mm512_permutexvar_ps(_mm512_srli_epi32(c, 4), lut);
  }
}

/// The E4M3 values of k-row k, unscaled (the group scale is applied to the group's sum).
template <class F>
inline void load_e4m3_row(const QPanel<F>& p, index_t k, __m512 (&w)[4]) noexcept {
  const std::uint8_t* row = p.codes + k * F::row_bytes;
  for (int v = 0; v < 4; ++v) w[v] = simd::e4m3_to_ps(simd::widen16(row + 16 * v));
}

/// k-row k of a panel as four fp32 vectors (the dequantized weights), given its group's scales.
template <class F>
inline void load_qrow(const QPanel<F>& p, index_t k, const __m512 (&s)[4], __m512 (&w)[4]) noexcept {
  if constexpr (F::code == qcode::e4m3) load_e4m3_row(p, k, w);
  else load_e2m1_row(p, k, w);
  for (int v = 0; v < 4; ++v) w[v] = _mm512_mul_ps(w[v], s[v]);
  if constexpr (F::scale == qscale::e4m3) {
    const __m512 g = _mm512_set1_ps(p.global);
    for (int v = 0; v < 4; ++v) w[v] = _mm512_mul_ps(w[v], g);
  }
}

/// slab[k − k0][64] = the dequantized k-rows [k0, k1) of a panel.
template <class F>
inline void expand(const QPanel<F>& p, index_t k0, index_t k1, float* slab) noexcept {
  __m512 s[4], w[4];
  index_t g = -1;
  for (index_t k = k0; k < k1; ++k, slab += panel_cols) {
    if (k / F::group != g) load_group_scales(p, g = k / F::group, s);
    load_qrow(p, k, s, w);
    for (int v = 0; v < 4; ++v) _mm512_store_ps(slab + 16 * v, w[v]);
  }
}

/// The E2M1 decode loops' frame: c[M][64] = the sum over the scale groups [g0, g1) of K of the
/// group's sums of unscaled products (group(g0, g1, blk) adds them to blk, zeroed) times the
/// group's scales (NVFP4: and the panel's factor after them), once a group.
template <int M, class F, class Group>
inline void e2m1_group_sums(index_t K, const QPanel<F>& p, float* c, Group group) noexcept {
  __m512 acc[M][4], blk[M][4], s[4];
  for (int r = 0; r < M; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_ps();
  for (index_t g0 = 0; g0 < K; g0 += F::group) {
    for (int r = 0; r < M; ++r)
      for (int v = 0; v < 4; ++v) blk[r][v] = _mm512_setzero_ps();
    group(g0, std::min(K, g0 + F::group), blk);
    load_group_scales(p, g0 / F::group, s);
    if constexpr (F::scale == qscale::e4m3)
      for (int v = 0; v < 4; ++v) s[v] = _mm512_mul_ps(s[v], _mm512_set1_ps(p.global));
    for (int r = 0; r < M; ++r)
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_fmadd_ps(blk[r][v], s[v], acc[r][v]);
  }
  for (int r = 0; r < M; ++r)
    for (int v = 0; v < 4; ++v) _mm512_store_ps(c + r * panel_cols + 16 * v, acc[r][v]);
}

/// C[M][64] = sum over k in [0, K) of a[r][k] · W[k][:] for M = 1 or 2, widening in registers (the
/// decode path). The products with the unscaled values are summed over a scale group and the sum
/// is scaled once per group: E4M3 panels in two accumulator sets (even and odd k) as in
/// decode.hpp, each weight's rounding of e4m3 · s replaced by one rounding of the group's scaled
/// sum (a multiply a weight less); E2M1 panels in one (for MXFP4 the scale is a power of two, so
/// this changes no bit of a group's sum; NVFP4's (e4m3 · scale_2) is rounded once per group
/// instead of once per weight).
template <int M, class F>
inline void decode_qtile(const float* const* a, index_t K, const QPanel<F>& p, float* c) noexcept {
  constexpr index_t ahead = 4096;  // bytes of codes prefetched ahead of the loads
  __m512 s[4], w[4];
  if constexpr (F::code == qcode::e2m1) {
    e2m1_group_sums<M>(K, p, c, [&](index_t g0, index_t g1, __m512 (&blk)[M][4]) {
      for (index_t k = g0; k < g1; ++k) {
        if (k % 2 == 0)
          _mm_prefetch(reinterpret_cast<const char*>(p.codes + k * F::row_bytes) + ahead, _MM_HINT_T0);
        load_e2m1_row(p, k, w);
        for (int r = 0; r < M; ++r) {
          const __m512 x = _mm512_set1_ps(a[r][k]);
          for (int v = 0; v < 4; ++v) blk[r][v] = _mm512_fmadd_ps(x, w[v], blk[r][v]);
        }
      }
    });
  } else {
    __m512 acc[M][4], even[M][4], odd[M][4], u[4];
    for (int r = 0; r < M; ++r)
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_ps();
    for (index_t g0 = 0; g0 < K; g0 += F::group) {
      for (int r = 0; r < M; ++r)
        for (int v = 0; v < 4; ++v) even[r][v] = odd[r][v] = _mm512_setzero_ps();
      const index_t g1 = std::min(K, g0 + F::group);
      index_t k = g0;
      for (; k + 1 < g1; k += 2) {
        prefetch_lines(p.codes + k * F::row_bytes, ahead, ahead + 2 * F::row_bytes);
        load_e4m3_row(p, k, w);
        load_e4m3_row(p, k + 1, u);
        for (int r = 0; r < M; ++r) {
          const __m512 x = _mm512_set1_ps(a[r][k]), y = _mm512_set1_ps(a[r][k + 1]);
          for (int v = 0; v < 4; ++v) {
            even[r][v] = _mm512_fmadd_ps(x, w[v], even[r][v]);
            odd[r][v] = _mm512_fmadd_ps(y, u[v], odd[r][v]);
          }
        }
      }
      if (k < g1) {
        load_e4m3_row(p, k, w);
        for (int r = 0; r < M; ++r) {
          const __m512 x = _mm512_set1_ps(a[r][k]);
          for (int v = 0; v < 4; ++v) even[r][v] = _mm512_fmadd_ps(x, w[v], even[r][v]);
        }
      }
      load_group_scales(p, g0 / F::group, s);
      for (int r = 0; r < M; ++r)
        for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_fmadd_ps(_mm512_add_ps(even[r][v], odd[r][v]), s[v], acc[r][v]);
    }
    for (int r = 0; r < M; ++r)
      for (int v = 0; v < 4; ++v) _mm512_store_ps(c + r * panel_cols + 16 * v, acc[r][v]);
  }
}

#if POLYMOE_TILED_DPBF16
/// decode_qtile for an E2M1 panel where vdpbf16ps issues at the FMA's rate (AMD Zen 4;
/// POLYMOE_TILED_DPBF16): per k-pair, the two k-rows' codes interleaved (load_kpair) become the
/// bf16 pairs (row k, row k + 1) of 16 columns with one vpermw from the signed E2M1 values (exact in
/// bf16), and one vdpbf16ps a row adds both products of each column: a quarter of the shuffles of
/// decode_qtile's widening to fp32, which bounds that loop there (one core, in cache: 1.2 against
/// 2.4 ns a k-row). Rows of bf16 values (the W4A16 schemes round them) enter as they are; with
/// Split, rows of fp32 values enter as two terms, hi = bf16(x) and lo = bf16(x - hi), as the AMX
/// tiles take them (docs/decisions.md#bf16-terms: x within 2^-17 |x|), two vdpbf16ps a row. The
/// products are exact; the sums are fp32 in the instruction's rounding, pairs in k order,
/// subnormal inputs and results flushed to zero, and a scale group's sum is scaled once, as
/// decode_qtile does.
template <int M, bool Split, class F>
inline void decode_qtile_bf16(const float* const* a, index_t K, const QPanel<F>& p, float* c) noexcept {
  static_assert(F::code == qcode::e2m1 && F::group % 16 == 0, "k-pairs within the scale groups of E2M1 panels");
  constexpr index_t ahead = 4096;  // bytes of codes prefetched ahead of the loads, as decode_qtile
  constexpr int terms = Split ? 2 : 1;
  const __m512i lut = _mm512_loadu_si512(detail::e2m1_bf16_table.data());
  e2m1_group_sums<M>(K, p, c, [&](index_t g0, index_t g1, __m512 (&blk)[M][4]) {
    // the group's k of each row as bf16 terms, 0 from K on: bf16 rows by their top halves, fp32
    // rows split (simd::split_bf16, as the AMX tiles' rows)
    alignas(64) std::uint16_t xs[M][terms][F::group];
    for (int r = 0; r < M; ++r)
      for (index_t k = g0; k < g1; k += 16) {
        const auto mask = static_cast<__mmask16>(g1 - k >= 16 ? 0xFFFF : (1u << (g1 - k)) - 1u);
        const __m512 x = _mm512_maskz_loadu_ps(mask, a[r] + k);
        const auto at = [&](int t) { return reinterpret_cast<__m256i*>(&xs[r][t][k - g0]); };
        if constexpr (Split) {
          __m512 hi, lo;  // vcvtneps2bf16 flushes subnormals, as vdpbf16ps does to its inputs
          simd::split_bf16(x, hi, lo, [](__m512 v) { return _mm512_cvtpbh_ps(_mm512_cvtneps_pbh(v)); });
          _mm256_store_si256(at(0), simd::bf16_bits(hi));
          _mm256_store_si256(at(1), simd::bf16_bits(lo));
        } else {
          _mm256_store_si256(at(0), simd::bf16_bits(x));
        }
      }
    for (index_t k = g0; k < g1; k += 2) {
      __m512i half[2];
      detail::load_kpair<ahead>(p.codes, k, K, half);
      __m512bh w[4];
      for (int v = 0; v < 4; ++v)  // columns 16v ..: byte j of half v / 2, its low nibble or its high one
        w[v] = reinterpret_cast<__m512bh>(
            _mm512_permutexvar_epi16(v % 2 == 0 ? half[v / 2] : _mm512_srli_epi16(half[v / 2], 4), lut));
      for (int r = 0; r < M; ++r)
        for (int t = 0; t < terms; ++t) {
          std::uint32_t pair;
          std::memcpy(&pair, &xs[r][t][k - g0], sizeof pair);
          const auto x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
          for (int v = 0; v < 4; ++v) blk[r][v] = _mm512_dpbf16_ps(blk[r][v], x, w[v]);
        }
    }
  });
}
#endif

/// Rows per block up to which block_times_panel runs qtile on a quantized panel (above: a slab
/// expanded into L1 and tile<M> over it). Four rows: qtile<4> keeps 16 accumulators, the k-row's
/// 4 weights and its group's 4 scales in registers.
inline constexpr int max_qtile_rows = 4;

/// C[M][64] = sum over k in [0, K) of a[r][k] · W[k][:] for M rows (3 to max_qtile_rows): each
/// k-row widened and scaled in registers (load_qrow: the values expand writes) and each output one
/// k-ordered chain of FMAs, as tile<M> runs them over expand's slabs, so the same bits, without the
/// fp32 slab's stores and loads; the codes prefetched ahead as in decode_qtile.
template <int M, class F>
inline void qtile(const float* const* a, index_t K, const QPanel<F>& p, float* c) noexcept {
  static_assert(M >= 1 && M <= max_qtile_rows);
  constexpr index_t ahead = 4096;  // bytes of codes prefetched ahead of the loads
  __m512 acc[M][4], s[4], w[4];
  for (int r = 0; r < M; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_ps();
  index_t g = -1;
  for (index_t k = 0; k < K; ++k) {
    if ((k * F::row_bytes) % 64 == 0)
      _mm_prefetch(reinterpret_cast<const char*>(p.codes + k * F::row_bytes) + ahead, _MM_HINT_T0);
    if (k / F::group != g) load_group_scales(p, g = k / F::group, s);
    load_qrow(p, k, s, w);
    for (int r = 0; r < M; ++r) {
      const __m512 x = _mm512_set1_ps(a[r][k]);
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_fmadd_ps(x, w[v], acc[r][v]);
    }
  }
  for (int r = 0; r < M; ++r)
    for (int v = 0; v < 4; ++v) _mm512_store_ps(c + r * panel_cols + 16 * v, acc[r][v]);
}

#pragma GCC diagnostic pop

#else  // portable

/// slab[k − k0][64] = the dequantized k-rows [k0, k1) of a panel.
template <class F>
inline void expand(const QPanel<F>& p, index_t k0, index_t k1, float* slab) noexcept {
  for (index_t k = k0; k < k1; ++k, slab += panel_cols)
    for (index_t c = 0; c < panel_cols; ++c) {
      const auto [byte, shift] = code_position<F>(c);
      const std::uint8_t code = static_cast<std::uint8_t>(p.codes[k * F::row_bytes + byte] >> shift);
      const auto sc = p.scales[(k / F::group) * panel_cols + c];
      if constexpr (F::code == qcode::e4m3) {
        slab[c] = codecs::e4m3_to_float(code) * sc;
      } else if constexpr (F::scale == qscale::e8m0) {
        slab[c] = codecs::e2m1_to_float(code & 0xF) * codecs::e8m0_to_float(sc);
      } else {
        slab[c] = codecs::e2m1_to_float(code & 0xF) * codecs::e4m3_to_float(sc) * p.global;
      }
    }
}

#endif

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_QPANEL
