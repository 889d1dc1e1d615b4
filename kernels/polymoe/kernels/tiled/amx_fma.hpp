// AVX-512 loops over the bf16 AMX layout, for blocks too small for the tiles (the FMA loop, or
// vdpbf16ps where the target has it) and the decode path, and the rounding of rows to bf16 tile rows.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_AMX_FMA) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_AMX_FMA
#undef POLYMOE_TILED_GUARD_AMX_FMA
#else
#define POLYMOE_TILED_GUARD_AMX_FMA
#endif
#include <algorithm>
#include <cstdint>
#include <cstring>

#include <polymoe/codecs/bf16.hpp>
#include <polymoe/kernels/tiled/amx_layout.hpp>
#include <polymoe/kernels/tiled/epilogue.hpp>
#include <polymoe/kernels/tiled/microkernel.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

#if POLYMOE_TILED_AVX512

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

#if POLYMOE_TILED_ISA_BF16

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

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_AMX_FMA
