// Activation quantizers of the tiled kernels, sixteen values to a register: E4M3 rows (the W8A8
// fp8 schemes: quant::fp8 one group a row, quant::fp8_block groups of 128, quantize/fp8.hpp's
// fake_quantize_e4m3 operation for operation) and NVFP4 W4A4 rows (quant::nvfp4_w4a4: a per-row
// scale_2 = amax / (6 · 448), then blocks of 16 E2M1 values under an E4M3 block scale,
// quantize/nvfp4.hpp's arithmetic operation for operation).
//
// An NVFP4 activation is e2m1 · e4m3 · scale_2, multiplied left to right. Its first product has at
// most six significant bits and is a normal bf16 number or zero, so the tiles take the row as those
// products (quantize_nvfp4_tile_row) with scale_2 beside them; kernel::tiled takes the fp32 values
// (fake_quantize_nvfp4_row), bit for bit the scheme's quantize_activation, which stays the oracle.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_ACT_QUANT) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_ACT_QUANT
#undef POLYMOE_TILED_GUARD_ACT_QUANT
#else
#define POLYMOE_TILED_GUARD_ACT_QUANT
#endif
#include <algorithm>
#include <cstdint>
#include <span>

#include <polymoe/codecs/e2m1.hpp>
#include <polymoe/codecs/e4m3.hpp>
#include <polymoe/quantize/fp8.hpp>
#include <polymoe/quantize/nvfp4.hpp>
#include <polymoe/kernels/tiled/epilogue.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

#if POLYMOE_TILED_AVX512

namespace simd {

/// v rounded to the nearest E4M3 value (ties to even; the subnormal step 2^-9 below 2^-6),
/// magnitudes from 448 up saturated to 448, as codecs::float_to_e4m3_sat then e4m3_to_float for
/// finite v: the step 2^(floor(log2 |v|) - 3), at least 2^-9, scaled to 1, rounded, scaled back.
inline __m512 round_e4m3(__m512 v) noexcept {
  const __m512 sign = _mm512_set1_ps(-0.0f), three = _mm512_set1_ps(3.0f);
  const __m512 a = _mm512_andnot_ps(sign, v);
  const __m512 e = _mm512_max_ps(_mm512_getexp_ps(a), _mm512_set1_ps(-6.0f));  // getexp(0) = -inf
  const __m512 r = _mm512_roundscale_ps(_mm512_scalef_ps(a, _mm512_sub_ps(three, e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 q = _mm512_min_ps(_mm512_scalef_ps(r, _mm512_sub_ps(e, three)), _mm512_set1_ps(codecs::e4m3_max));
  return _mm512_or_ps(q, _mm512_and_ps(sign, v));
}

/// v rounded to the nearest E2M1 value (ties to the even code; the step 0.5 below 2), magnitudes
/// from 6 up saturated to 6, zero as +0, as codecs::float_to_e2m1 then e2m1_to_float for finite v:
/// the step 2^(floor(log2 |v|) - 1), at least 0.5, scaled to 1, rounded, scaled back.
inline __m512 round_e2m1(__m512 v) noexcept {
  const __m512 sign = _mm512_set1_ps(-0.0f), one = _mm512_set1_ps(1.0f);
  const __m512 a = _mm512_min_ps(_mm512_andnot_ps(sign, v), _mm512_set1_ps(codecs::e2m1_max));
  const __m512 e = _mm512_max_ps(_mm512_getexp_ps(a), _mm512_setzero_ps());  // getexp(0) = -inf
  const __m512 r = _mm512_roundscale_ps(_mm512_scalef_ps(a, _mm512_sub_ps(one, e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 q = _mm512_scalef_ps(r, _mm512_sub_ps(e, one));
  const __mmask16 nonzero = _mm512_cmp_ps_mask(q, _mm512_setzero_ps(), _CMP_NEQ_OQ);
  return _mm512_mask_or_ps(q, nonzero, q, _mm512_and_ps(sign, v));
}

/// One NVFP4 block of a row whose scale_2 is s2 (> 0; d6 = 6 · s2 in fp32), zero beyond its end:
/// each value's e2m1 · e4m3, exact in fp32 and in bf16 (the block scale e4m3 = e4m3_sat(amax /
/// d6), 1 for an all-zero block; e2m1 = e2m1(x / (e4m3 · s2)), zero when that divisor is zero).
inline __m512 nvfp4_block(__m512 x, float s2, float d6) noexcept {
  const float block_amax = _mm512_reduce_max_ps(_mm512_abs_ps(x));
  if (block_amax == 0.0f) return _mm512_setzero_ps();
  const float scale = _mm_cvtss_f32(_mm512_castps512_ps128(round_e4m3(_mm512_set1_ps(block_amax / d6))));
  const float denom = scale * s2;
  if (denom == 0.0f) return _mm512_setzero_ps();
  return _mm512_mul_ps(round_e2m1(_mm512_div_ps(x, _mm512_set1_ps(denom))), _mm512_set1_ps(scale));
}

/// The largest magnitude of the values [i0, i1) that `load` gives sixteen at a time (load(i): the
/// values from i); `finite` says whether none of them is an infinity or a NaN.
template <class Load>
inline float amax_of(Load load, index_t i0, index_t i1, bool& finite) noexcept {
  __m512 amax = _mm512_setzero_ps();
  __mmask16 odd = 0;  // lanes that held an infinity or a NaN
  for (index_t i = i0; i < i1; i += 16) {
    const __m512 x = load(i);
    odd |= _mm512_fpclass_ps_mask(x, 0x99);
    amax = _mm512_max_ps(amax, _mm512_abs_ps(x));
  }
  finite = odd == 0;
  return _mm512_reduce_max_ps(amax);
}

}  // namespace simd

/// The row's NVFP4 scale_2 for the n values `load` gives, or 0 when the scheme leaves the row as it
/// is (a non-finite value) or it is all zero.
template <class Load>
inline float nvfp4_row_scale(Load load, index_t n, bool& finite) noexcept {
  const float a = simd::amax_of(load, 0, n, finite);
  return finite && a > 0.0f ? quantize::nvfp4_scale_2(a) : 0.0f;
}

/// quantize::fake_quantize_e4m3 of a row in place, groups of `group` values, bit for bit: a group's
/// values x / s rounded to E4M3 (saturating) times s, s = amax / 448; groups holding an infinity or
/// a NaN, and all-zero groups, left as they are.
inline void fake_quantize_e4m3_row(std::span<float> row, index_t group) noexcept {
  float* x = row.data();
  const auto n = static_cast<index_t>(row.size());
  for (index_t g0 = 0; g0 < n; g0 += group) {
    const index_t g1 = std::min(n, g0 + group);
    const auto load = [&](index_t i) { return _mm512_maskz_loadu_ps(simd::tail_mask(g1 - i), x + i); };
    bool finite = true;
    const float a = simd::amax_of(load, g0, g1, finite);
    if (!finite || a == 0.0f) continue;
    const __m512 s = _mm512_set1_ps(quantize::e4m3_scale(a));
    for (index_t i = g0; i < g1; i += 16)
      _mm512_mask_storeu_ps(x + i, simd::tail_mask(g1 - i),
                            _mm512_mul_ps(simd::round_e4m3(_mm512_div_ps(load(i), s)), s));
  }
}

/// quant::nvfp4_w4a4's activation quantization of a row in place (quantize::fake_quantize_nvfp4,
/// bit for bit): rows with a non-finite value, and zero rows, left as they are.
inline void fake_quantize_nvfp4_row(std::span<float> row) noexcept {
  float* x = row.data();
  const auto n = static_cast<index_t>(row.size());
  const auto load = [&](index_t i) { return _mm512_maskz_loadu_ps(simd::tail_mask(n - i), x + i); };
  bool finite = true;
  const float s2 = nvfp4_row_scale(load, n, finite);
  if (s2 == 0.0f) return;
  const float d6 = codecs::e2m1_max * s2;
  const __m512 g = _mm512_set1_ps(s2);
  for (index_t i = 0; i < n; i += 16)
    _mm512_mask_storeu_ps(x + i, simd::tail_mask(n - i), _mm512_mul_ps(simd::nvfp4_block(load(i), s2, d6), g));
}

/// src[0..n) · wt quantized as quant::nvfp4_w4a4 quantizes a row, for the bf16 tiles: dst[i] = the
/// bf16 bits of e2m1 · e4m3 (exact) and zeros from n to n32; returns scale_2, the factor of the
/// row's sums. A zero row is written as zeros (scale 1); a row holding an infinity or a NaN, which
/// the scheme leaves as it is, as bf16(x) with scale 1, so the row's outputs are not finite either way.
inline float quantize_nvfp4_tile_row(const float* src, float wt, index_t n, index_t n32, std::uint16_t* dst) noexcept {
  const __m512 w = _mm512_set1_ps(wt);
  const auto load = [&](index_t i) { return _mm512_mul_ps(_mm512_maskz_loadu_ps(simd::tail_mask(n - i), src + i), w); };
  const auto store = [&](index_t i, __m512 bf16_exact) {
    _mm256_mask_storeu_epi16(dst + i, simd::tail_mask(n - i), simd::bf16_bits(bf16_exact));
  };
  bool finite = true;
  const float s2 = nvfp4_row_scale(load, n, finite);
  const float d6 = codecs::e2m1_max * s2;
  for (index_t i = 0; i < n; i += 16)
    store(i, s2 != 0.0f ? simd::nvfp4_block(load(i), s2, d6)
             : finite   ? _mm512_setzero_ps()
                        : simd::round_bf16(load(i)));
  std::fill(dst + n, dst + n32, std::uint16_t{0});
  return s2 == 0.0f ? 1.0f : s2;
}

#else

/// Without AVX-512: the schemes' own quantizers.
inline void fake_quantize_e4m3_row(std::span<float> row, index_t group) noexcept {
  quantize::fake_quantize_e4m3(row, group);
}
inline void fake_quantize_nvfp4_row(std::span<float> row) noexcept { quantize::fake_quantize_nvfp4(row); }

#endif

/// quant::fp8's (Group 0: one group a row) and quant::fp8_block's (Group 128) inputs in the tiled
/// kernels: each GEMM input row quantized as the scheme's quantize_activation does, vectorized.
template <index_t Group>
struct e4m3_inputs {
  static constexpr bool round_bf16 = false, per_row = true;
  static void row(std::span<float> r) noexcept {
    fake_quantize_e4m3_row(r, Group > 0 ? Group : static_cast<index_t>(r.size()));  // an empty row: no group
  }
};

/// quant::nvfp4_w4a4's inputs in the tiled kernels: each GEMM input row quantized as the scheme's
/// quantize_activation does, vectorized.
struct nvfp4_w4a4_inputs {
  static constexpr bool round_bf16 = false, per_row = true;
  static void row(std::span<float> r) noexcept { fake_quantize_nvfp4_row(r); }
};

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_ACT_QUANT
