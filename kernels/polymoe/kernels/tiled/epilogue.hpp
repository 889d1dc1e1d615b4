// What the tiled kernel does to a finished tile: the fused activation of the first GEMM and the
// activation rounding of a quant scheme with bf16 activations. The vector versions compute the
// functions of core/activation.hpp (exp to about one ulp; gelu uses the scalar erf) and round to
// bf16 exactly as codecs::float_to_bf16 does, NaN included.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_EPILOGUE) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_EPILOGUE
#undef POLYMOE_TILED_GUARD_EPILOGUE
#else
#define POLYMOE_TILED_GUARD_EPILOGUE
#endif
#include <cstdint>
#include <type_traits>

#include <polymoe/core/activation.hpp>
#include <polymoe/codecs/bf16.hpp>
#include <polymoe/kernels/tiled/microkernel.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

#if POLYMOE_TILED_AVX512

namespace simd {

/// The lanes of a 16-float vector that hold the `left` values still to do (all 16 when left >= 16).
inline __mmask16 tail_mask(index_t left) noexcept {
  return left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
}

/// e^x: 2^n · e^r with n = round(x·log2 e), r = x − n·ln 2 (ln 2 in two parts), e^r by its
/// degree-6 Taylor polynomial (|r| <= ln 2 / 2: relative error about 1e-7).
inline __m512 exp(__m512 x) noexcept {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(100.0f)), _mm512_set1_ps(-110.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

/// x · sigmoid(a·x) = x / (1 + e^(−a·x)).
inline __m512 x_sigmoid(__m512 x, __m512 a) noexcept {
  const __m512 e = exp(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), a), x));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

/// fp32 -> bf16 -> fp32, round to nearest even, NaN kept (quiet), as codecs::float_to_bf16.
inline __m512 round_bf16(__m512 x) noexcept {
  const __m512i b = _mm512_castps_si512(x);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(b, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb));
  r = _mm512_and_si512(r, high);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512i quiet = _mm512_or_si512(_mm512_and_si512(b, high), _mm512_set1_epi32(0x00400000));
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(r, nan, quiet));
}

/// The bf16 bits of sixteen values already rounded to bf16 (their upper halves).
inline __m256i bf16_bits(__m512 rounded) noexcept {
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(rounded), 16));
}

/// x as two bf16 terms, hi = bf16(x) and lo = bf16(x - hi), which leaves |x - hi - lo| <= 2^-17 |x|;
/// an infinite x gets lo = 0, so that hi alone carries it (x - hi would be NaN). `round`: fp32 to
/// bf16 values, to nearest even (round_bf16, or vcvtneps2bf16's where the reader of the terms flushes
/// subnormal bf16 inputs anyway and the instruction is cheaper).
template <class Round>
inline void split_bf16(__m512 x, __m512& hi, __m512& lo, Round round) noexcept {
  hi = round(x);
  lo = _mm512_mask_mov_ps(round(_mm512_sub_ps(x, hi)), _mm512_fpclass_ps_mask(x, 0x18), _mm512_setzero_ps());
}
inline void split_bf16(__m512 x, __m512& hi, __m512& lo) noexcept {
  split_bf16(x, hi, lo, [](__m512 v) { return round_bf16(v); });
}

}  // namespace simd

/// h[0..n) = f(g[0..n)) or f(g, u) (u == nullptr: non-gated), then rounded to bf16 if RoundBf16;
/// Out = std::uint16_t stores the bf16 bits themselves (RoundBf16 must be set).
template <bool RoundBf16, class Out = float>
inline void activate(const ActivationParams& p, const float* g, const float* u, Out* h, index_t n) noexcept {
  static_assert(std::is_same_v<Out, float> || (RoundBf16 && std::is_same_v<Out, std::uint16_t>));
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  for (index_t j = 0; j < n; j += 16) {
    const __mmask16 m = simd::tail_mask(n - j);
    const __m512 x = _mm512_maskz_loadu_ps(m, g + j);
    __m512 y;
    switch (p.kind) {
      case Activation::silu_gated:
        y = _mm512_mul_ps(simd::x_sigmoid(x, one), _mm512_maskz_loadu_ps(m, u + j));
        break;
      case Activation::swiglu_oai: {
        const __m512 lim = _mm512_set1_ps(p.limit);
        const __m512 gc = _mm512_min_ps(lim, x);  // min(g, limit), NaN kept as std::min does
        __m512 uc = _mm512_maskz_loadu_ps(m, u + j);
        uc = _mm512_max_ps(_mm512_sub_ps(zero, lim), _mm512_min_ps(lim, uc));
        y = _mm512_mul_ps(simd::x_sigmoid(gc, _mm512_set1_ps(p.alpha)), _mm512_add_ps(uc, one));
        break;
      }
      case Activation::silu:
        y = simd::x_sigmoid(x, one);
        break;
      case Activation::relu2: {
        const __m512 r = _mm512_max_ps(x, zero);
        y = _mm512_mul_ps(r, r);
        break;
      }
      default: {  // gelu_gated: the scalar erf
        alignas(64) float t[16];
        _mm512_store_ps(t, x);
        for (index_t i = 0; i < 16 && j + i < n; ++i) t[i] = act::gelu_erf(t[i]) * u[j + i];
        y = _mm512_load_ps(t);
        break;
      }
    }
    if constexpr (RoundBf16) y = simd::round_bf16(y);
    if constexpr (std::is_same_v<Out, std::uint16_t>) {
      const __m256i bits = simd::bf16_bits(y);
      if (m == __mmask16(0xFFFF)) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + j), bits);
      } else {
        alignas(32) std::uint16_t t[16];
        _mm256_store_si256(reinterpret_cast<__m256i*>(t), bits);
        for (index_t i = 0; j + i < n; ++i) h[j + i] = t[i];
      }
    } else {
      _mm512_mask_storeu_ps(h + j, m, y);
    }
  }
}

/// x[0..n) rounded to bf16 in place.
inline void round_bf16(float* x, index_t n) noexcept {
  for (index_t j = 0; j < n; j += 16) {
    const __mmask16 m = simd::tail_mask(n - j);
    _mm512_mask_storeu_ps(x + j, m, simd::round_bf16(_mm512_maskz_loadu_ps(m, x + j)));
  }
}

#else  // portable

/// h[0..n) = f(g[0..n)) or f(g, u) (u == nullptr: non-gated), then rounded to bf16 if RoundBf16;
/// Out = std::uint16_t stores the bf16 bits themselves (RoundBf16 must be set).
template <bool RoundBf16, class Out = float>
inline void activate(const ActivationParams& p, const float* g, const float* u, Out* h, index_t n) noexcept {
  static_assert(std::is_same_v<Out, float> || (RoundBf16 && std::is_same_v<Out, std::uint16_t>));
  for (index_t j = 0; j < n; ++j) {
    float y = 0.0f;
    switch (p.kind) {
      case Activation::silu_gated: y = act::silu(g[j]) * u[j]; break;
      case Activation::gelu_gated: y = act::gelu_erf(g[j]) * u[j]; break;
      case Activation::swiglu_oai: y = act::swiglu_oai(g[j], u[j], p.alpha, p.limit); break;
      case Activation::silu: y = act::silu(g[j]); break;
      case Activation::relu2: y = act::relu2(g[j]); break;
    }
    if constexpr (std::is_same_v<Out, std::uint16_t>)
      h[j] = codecs::float_to_bf16(y);
    else if constexpr (RoundBf16)
      h[j] = codecs::bf16_to_float(codecs::float_to_bf16(y));
    else
      h[j] = y;
  }
}

/// x[0..n) rounded to bf16 in place.
inline void round_bf16(float* x, index_t n) noexcept {
  codecs::round_to_bf16(std::span<float>(x, static_cast<std::size_t>(n)));
}

#endif

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_EPILOGUE
