// The epilogues of a row block's tile: GEMM 1's (bias, activation, rounding as the scheme says,
// into the intermediate) and GEMM 2's (bias, routing weight, into y, with non-temporal stores where
// y outgrows the caches).
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_FINISH) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_FINISH
#undef POLYMOE_TILED_GUARD_FINISH
#else
#define POLYMOE_TILED_GUARD_FINISH
#endif
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <polymoe/core/formats.hpp>
#include <polymoe/kernels/tiled/buffer.hpp>
#include <polymoe/kernels/tiled/epilogue.hpp>
#include <polymoe/kernels/tiled/microkernel.hpp>
#include <polymoe/kernels/tiled/phases.hpp>
#include <polymoe/kernels/tiled/prepack.hpp>
#include <polymoe/kernels/tiled/sort.hpp>
#include <polymoe/kernels/tiled/tuning.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

namespace detail {

#if POLYMOE_TILED_AVX512
/// Whether a row of n values at dst takes non-temporal stores (store_lanes) when the caller asks
/// for them (`stream`; see stream_y): only a whole 64-byte-aligned panel row (n = 64).
inline bool streams_row(bool stream, const float* dst, index_t n) noexcept {
  return stream && n == panel_cols && reinterpret_cast<std::uintptr_t>(dst) % 64 == 0;
}

/// Lanes m of v into p; with `stream` (streams_row: all 16 lanes, p aligned) a non-temporal store.
inline void store_lanes(float* p, __mmask16 m, __m512 v, bool stream) noexcept {
  if (stream)
    _mm512_stream_ps(p, v);
  else
    _mm512_mask_storeu_ps(p, m, v);
}
#endif

/// dst[0..n) = (c[q] + bias[q]) · wt (n <= 64; dst may be c). With AVX-512 in whole 64-byte
/// vectors: the tile just written by the micro-kernel (or by the int8 scaling) is read back by the
/// same width it was stored with, so no load waits on a failed store-to-load forward (GCC's own
/// vectorization of the loop uses 32-byte halves here). `stream`: a whole aligned row is stored
/// with non-temporal stores (streams_row; the caller fences them).
inline void add_row(const float* c, const float* bias, float wt, float* dst, index_t n, bool stream = false) noexcept {
#if POLYMOE_TILED_AVX512
  const __m512 w = _mm512_set1_ps(wt);
  stream = streams_row(stream, dst, n);
  for (index_t q = 0; q < n; q += 16) {
    const __mmask16 m = simd::tail_mask(n - q);
    const __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, c + q), _mm512_maskz_loadu_ps(m, bias + q));
    store_lanes(dst + q, m, _mm512_mul_ps(v, w), stream);
  }
#else
  (void)stream;
  for (index_t q = 0; q < n; ++q) dst[q] = (c[q] + bias[q]) * wt;
#endif
}

/// One row of finish13: ci, a row of panel cb's tile, plus bias (AddBias), activated into
/// row[cb · act_cols, ...), the row's columns of the activations.
template <bool RoundBf16, bool AddBias = true, class Out>
inline void finish13_row(const ExpertMlp& mlp, const PanelGrid& pk, index_t cb, const float* bias, float* ci,
                         Out* row) {
  const index_t I = pk.shape.intermediate, act_cols = pk.act_cols();
  if constexpr (AddBias) add_row(ci, bias, 1.0f, ci, panel_cols);
  activate<RoundBf16>(mlp.activation, ci, pk.shape.gated ? ci + panel_cols / 2 : nullptr, row + cb * act_cols,
                      std::min(act_cols, I - cb * act_cols));
}

/// First-GEMM epilogue of a finished tile c[b.rows][64]: bias (unless AddBias is false: the
/// tile has it already), activation (rounded to bf16 if RoundBf16) into the block's rows of act
/// [N, ld] (fp32, or bf16 bits for the AMX inputs).
template <bool RoundBf16, class Out, bool AddBias = true>
inline void finish13(const ExpertMlp& mlp, const PanelGrid& pk, const RowBlock& b, index_t cb, float* c, Out* act,
                     index_t ld) {
  const float* bias = pk.bias13(b.expert, cb);
  for (index_t i = 0; i < b.rows; ++i)
    finish13_row<RoundBf16, AddBias>(mlp, pk, cb, bias, c + i * panel_cols, act + (b.begin + i) * ld);
}

/// Whether GEMM 2 streams its rows of y [N, H] (`y_bytes`) past the caches with non-temporal
/// stores. sum_slots reads y after the pipeline, and the pipeline streams the weights of every
/// expert with rows (`weight_bytes`) through the caches after the first rows of y are written: when
/// the two together are larger than the last-level cache (`llc_bytes`), y's lines cannot all stay
/// cached until the sum, and an ordinary store first reads each line from memory (for ownership)
/// only to write it back. Measured on the 16-core device machine with the Qwen3-30B-A3B layer: with
/// a 105 MiB LLC, streaming only a y larger than the LLC, int8 T=2048 was 1-19 % faster in seven of
/// seven rounds; with a 300 MiB LLC (the knob off and on in paired rounds in one process, weights
/// 0.6-1.2 GB) streaming was 0.6-5 % faster at T=512 (y 34 MB) and 4-22 % at T=2048 (134 MB) in
/// both formats, at 16 and at 2 threads (docs/decisions.md#y-streaming). Decode (8 experts, 75 MB
/// of bf16 weights, y 64 KiB) stays under the LLC and is not streamed.
[[nodiscard]] inline bool streams_y(std::size_t y_bytes, std::size_t weight_bytes, std::size_t llc_bytes) noexcept {
  return y_bytes + weight_bytes > llc_bytes;
}

/// streams_y for this machine's last-level cache (`choice` automatic; tuning::y_stream), else as
/// `choice` forces it at every size; `weight_bytes` as streams_y: `experts` (those with rows) x
/// `expert_bytes`.
inline bool stream_y(std::size_t y_bytes, index_t experts, index_t expert_bytes, mode choice) noexcept {
  if (choice != mode::automatic) return choice == mode::on;
  return streams_y(y_bytes, static_cast<std::size_t>(experts) * static_cast<std::size_t>(expert_bytes),
                   last_level_cache_bytes());
}

/// Second-GEMM epilogue, row by row: write(i, bias, wt, dst, n) stores row i of the block's
/// finished tile, plus bias, times wt into dst[0..n): the block's row of y [N, H] in this panel's
/// columns, wt the routing weight (row_weight[row]; 1 when the weight scaled the input). `stream`:
/// write streams its stores (stream_y), fenced here, so that they are in memory before the task
/// counts as done. The time is charged to gemm2_epilogue of `task_ns` (a timed pipeline worker's;
/// nullptr: not timed).
template <class Write>
inline void finish2_rows(const ExpertMlp& mlp, const PanelGrid& pk, const RowBlock& b, index_t cb,
                         const float* row_weight, float* y, bool stream, std::int64_t* task_ns, Write write) {
  const TaskClock clock(task_ns, PhaseTimes::gemm2_epilogue);
  const index_t H = pk.shape.hidden;
  const float* bias = pk.bias2(b.expert, cb);
  const index_t n = std::min(panel_cols, H - cb * panel_cols);
  for (index_t i = 0; i < b.rows; ++i)
    write(i, bias, mlp.weight_on_input ? 1.0f : row_weight[b.begin + i], y + (b.begin + i) * H + cb * panel_cols, n);
#if POLYMOE_TILED_AVX512
  if (stream) _mm_sfence();
#else
  (void)stream;
#endif
}

/// finish2_rows for an fp32 tile c[b.rows][64]: y[row] = (c + bias) · routing weight.
inline void finish2(const ExpertMlp& mlp, const PanelGrid& pk, const RowBlock& b, index_t cb, const float* c,
                    const float* row_weight, float* y, bool stream, std::int64_t* task_ns) {
  finish2_rows(mlp, pk, b, cb, row_weight, y, stream, task_ns,
               [c, stream](index_t i, const float* bias, float wt, float* dst, index_t n) {
                 add_row(c + i * panel_cols, bias, wt, dst, n, stream);
               });
}

}  // namespace detail

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_FINISH
