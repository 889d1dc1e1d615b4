#pragma once
// Pieces every quantizer shares: the largest magnitude of a run of values, the finiteness check
// on weights being quantized, and the re-layout of stored rows (moved, never requantized).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include <polymoe/core/error.hpp>
#include <polymoe/core/types.hpp>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace polymoe::quantize {

/// max |x[i]| over n values (0 for n = 0). A NaN is ignored by the comparison; callers that must
/// not see one check the weights first (ExpertWeights::validate). With AVX-512, sixteen running maxima: the same
/// value (max is exact and order-free, and _mm512_max_ps keeps the running maximum when |x| is
/// NaN, as the comparison does), without the scalar loop's chain of dependent vmaxss.
[[nodiscard]] inline float amax(const float* x, index_t n) noexcept {
  index_t i = 0;
  float m = 0.0f;
#if defined(__AVX512F__)
  if (n >= 16) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    __m512 m0 = _mm512_setzero_ps(), m1 = _mm512_setzero_ps();
    for (; i + 32 <= n; i += 32) {
      m0 = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + i)), m0);
      m1 = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + i + 16)), m1);
    }
    for (; i + 16 <= n; i += 16) m0 = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + i)), m0);
    m = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
  }
#endif
  for (; i < n; ++i) m = std::fabs(x[i]) > m ? std::fabs(x[i]) : m;
  return m;
}

/// amax(x, n) when all n values are finite, else NaN: the finiteness check and the maximum in one
/// pass over x (for the quantizers, which leave a row or group holding a non-finite value as it is).
[[nodiscard]] inline float amax_if_finite(const float* x, index_t n) noexcept {
  index_t i = 0;
  float m = 0.0f;
#if defined(__AVX512F__)
  if (n >= 16) {
    // |x| < inf is false for an infinity and (ordered compare) for a NaN
    const __m512 sign = _mm512_set1_ps(-0.0f), inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
    __m512 m0 = _mm512_setzero_ps(), m1 = _mm512_setzero_ps();
    __mmask16 ok0 = 0xFFFF, ok1 = 0xFFFF;
    for (; i + 32 <= n; i += 32) {
      const __m512 a = _mm512_andnot_ps(sign, _mm512_loadu_ps(x + i));
      const __m512 b = _mm512_andnot_ps(sign, _mm512_loadu_ps(x + i + 16));
      ok0 &= _mm512_cmp_ps_mask(a, inf, _CMP_LT_OQ);
      ok1 &= _mm512_cmp_ps_mask(b, inf, _CMP_LT_OQ);
      m0 = _mm512_max_ps(a, m0);
      m1 = _mm512_max_ps(b, m1);
    }
    for (; i + 16 <= n; i += 16) {
      const __m512 a = _mm512_andnot_ps(sign, _mm512_loadu_ps(x + i));
      ok0 &= _mm512_cmp_ps_mask(a, inf, _CMP_LT_OQ);
      m0 = _mm512_max_ps(a, m0);
    }
    if ((ok0 & ok1) != 0xFFFF) return std::numeric_limits<float>::quiet_NaN();
    m = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
  }
#endif
  for (; i < n; ++i) {
    if (!std::isfinite(x[i])) return std::numeric_limits<float>::quiet_NaN();
    m = std::fabs(x[i]) > m ? std::fabs(x[i]) : m;
  }
  return m;
}

/// GPT-OSS order -> canonical order, in place: in each of `experts` groups of `rows` stored rows
/// (row = `row_elems` elements of T), row 2j (gate) moves to j and row 2j+1 (up) to rows/2 + j.
/// Works on any per-row payload (packed blocks, scale codes, biases): whole rows move together.
template <class T>
void deinterleave_rows(std::vector<T>& data, index_t experts, index_t rows, index_t row_elems) {
  require(rows % 2 == 0, "deinterleave_rows: ", rows, " rows per expert cannot hold gate/up pairs");
  require(static_cast<index_t>(data.size()) == experts * rows * row_elems, "deinterleave_rows: ", data.size(),
          " elements, expected ", experts * rows * row_elems);
  std::vector<T> out(data.size());
  const index_t half = rows / 2;
  const auto at = [&](index_t e, index_t r) { return static_cast<std::size_t>((e * rows + r) * row_elems); };
  for (index_t e = 0; e < experts; ++e)
    for (index_t j = 0; j < half; ++j)
      for (index_t c = 0; c < row_elems; ++c) {
        out[at(e, j) + static_cast<std::size_t>(c)] = data[at(e, 2 * j) + static_cast<std::size_t>(c)];
        out[at(e, half + j) + static_cast<std::size_t>(c)] = data[at(e, 2 * j + 1) + static_cast<std::size_t>(c)];
      }
  data.swap(out);
}

/// True when a code is one of E4M3FN's two NaN codes (S.1111.111).
[[nodiscard]] constexpr bool is_e4m3_nan(std::uint8_t code) noexcept { return (code & 0x7Fu) == 0x7Fu; }

/// Number of blocks of `block` elements that cover n (the last one may be partial).
[[nodiscard]] constexpr index_t blocks_of(index_t n, index_t block) noexcept { return (n + block - 1) / block; }

}  // namespace polymoe::quantize
