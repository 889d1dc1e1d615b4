#pragma once
// The tiled kernel's forward pass on the standard format:
//
//   1. sort the (token, slot) pairs by expert into row blocks              (sort.hpp)
//   2. GEMM 1 over the grid (row block x w13 panel), all experts at once:
//      pre = x · W13ᵀ + b13, h = act(gate, up) rounded as the scheme says   (microkernel, epilogue)
//   3. GEMM 2 over the grid (row block x w2 panel): y = (h · W2ᵀ + b2) · w  (routing weight here,
//      or on the input when ExpertMlp::weight_on_input)
//   4. out[t] = sum over slots j, in slot order, of y[row_of(t, j)]         (fp32)
//
// Every output element is computed by one task with a fixed k order and the top-k sum runs in slot
// order, so the result is bitwise independent of the thread count. All buffers live in a
// Workspace that grows to the largest batch seen and is reused: after warm-up a forward allocates
// nothing.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <type_traits>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>
#include <polymoe/kernels/parallel.hpp>

#include <polymoe/core/error.hpp>
#include <polymoe/core/formats.hpp>
#include <polymoe/kernels/tiled/buffer.hpp>
#include <polymoe/kernels/tiled/decode.hpp>
#include <polymoe/kernels/tiled/epilogue.hpp>
#include <polymoe/kernels/tiled/microkernel.hpp>
#include <polymoe/kernels/tiled/phases.hpp>
#include <polymoe/kernels/tiled/prepack.hpp>
#include <polymoe/kernels/tiled/qpanel.hpp>
#include <polymoe/kernels/tiled/sort.hpp>
#include <polymoe/kernels/tiled/tuning.hpp>

namespace polymoe::kernels::tiled {

/// Whether bf16 blocks of more than max_tile_rows rows run tall tiles (microkernel.hpp), a
/// compile-time choice by the target: on Intel cores the widening shares the FMA ports, and the
/// tall tile halves it per FMA (16-core device machine, one thread, Qwen3-30B-A3B T=512: 76 % of
/// the FMA peak against 50 %); on AMD Zen 4 it runs on ports of its own, and the 6 x 64 tile,
/// with half the broadcasts, was faster (one thread, T=2048: 106-109 against 98 GFLOP/s;
/// docs/decisions.md#tall-tiles).
/// -DPOLYMOE_TILED_TALL=0/1 overrides.
#ifndef POLYMOE_TILED_TALL
#define POLYMOE_TILED_TALL (!POLYMOE_TILED_ZEN)
#endif

/// A pause in a spin-wait (x86: the pause instruction; elsewhere a yield).
inline void spin_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

/// Rows per row block: a block's tiles run one after another on one panel.
inline constexpr index_t block_rows = 48;
/// Rows per row block when AMX tiles run it (in row groups of 16), both formats: every row group
/// after the first reads the panel from L1, so the more rows one pass over a panel serves, the
/// less each waits on memory. With 128 (and amx_row_stride_bytes), bf16 T=2048 on 2 threads of the
/// device machine went from a median 535 to 628 GFLOP/s over noisy invocations. 256: at T = 2048
/// on Qwen3-30B-A3B an expert gets about 128 ± 11 rows, so 128 cut about half of the experts in
/// two, and GEMM 1 by block (detail::gemm1_by_block) streamed those experts' W13 panels once per
/// block. 256 was no faster while GEMM 1 ran by panel; with GEMM 1 by block, measured on the
/// 16-core device machine with the cut as a knob of one build, in paired rounds: int8 T=2048 4-15 %
/// faster in all four rounds, T=512 (about 32 rows an expert, the same blocks either way)
/// 0.95-1.04, and at 2 threads nothing resolved; bf16 (`bench_ratio --ab bf16-block-rows`, time
/// with 128 over time with 256, medians of 11 rounds) T=2048 1.071 and 1.098, T=512 0.984. See
/// docs/decisions.md#amx-row-blocks. The tiles of a block live on the stack of the thread that runs
/// it (2 x 64 KiB in GEMM 1 by block, either format).
inline constexpr index_t amx_block_rows = 256;
static_assert(tuning{}.bf16_block_rows == amx_block_rows, "tuning's bf16 cut defaults to amx_block_rows");
/// k per pass over a row block: a slab of the panel (32 KiB) that the block's tiles share from L1.
template <class W>
inline constexpr index_t k_block = 32768 / (panel_cols * static_cast<index_t>(sizeof(W)));

/// The scratch of one layer's forward. Buffers that hold GEMM rows are cache-line aligned (the heap
/// aligns to 16 bytes): a 64-byte tile row or vector of a row whose stride is a multiple of 64
/// then touches one line, not two.
struct Workspace {
  /// Per-block counters of detail::pipelined_tasks (scratch: a copy of the workspace starts empty).
  struct Counters {
    std::unique_ptr<std::atomic<std::int32_t>[]> v;
    std::size_t n = 0;
    Counters() = default;
    Counters(const Counters&) noexcept {}
    Counters& operator=(const Counters&) noexcept { return *this; }
    Counters(Counters&&) noexcept = default;
    Counters& operator=(Counters&&) noexcept = default;
    ~Counters() = default;
    /// At least `need` counters (grown, never shrunk).
    std::atomic<std::int32_t>* at_least(std::size_t need) {
      if (n < need) v.reset(new std::atomic<std::int32_t>[need]), n = need;
      return v.get();
    }
  };

  Workspace() = default;
  /// A workspace whose buffers take huge pages as `huge_pages` says (tuning::huge_pages).
  explicit Workspace(bool huge_pages)
      : x(CacheLineAllocator<float>(huge_pages)),
        act(CacheLineAllocator<float>(huge_pages)),
        y(CacheLineAllocator<float>(huge_pages)),
        xq(CacheLineAllocator<std::uint8_t>(huge_pages)),
        hq(CacheLineAllocator<std::uint8_t>(huge_pages)),
        xg(CacheLineAllocator<std::uint8_t>(huge_pages)),
        a16(CacheLineAllocator<std::uint16_t>(huge_pages)),
        h16(CacheLineAllocator<std::uint16_t>(huge_pages)),
        t16(CacheLineAllocator<std::uint16_t>(huge_pages)),
        block_in(CacheLineAllocator<std::uint8_t>(huge_pages)),
        block_act(CacheLineAllocator<float>(huge_pages)) {}

  ExpertRows sorted;
  Counters pending;  ///< [blocks] detail::pipelined_tasks
  std::vector<float> row_weight;     ///< [N] the routing weight of each sorted row
  std::vector<Task> tasks13, tasks2;
  std::vector<const float*> a_rows;  ///< [N] the first GEMM's input row of each sorted row
  AlignedVector<float> x;            ///< rounded (or weighted) input rows, when the scheme needs a copy
  AlignedVector<float> act;          ///< [N, I] activations, sorted-row order
  AlignedVector<float> y;            ///< [N, H] weighted expert outputs, sorted-row order
  // int8 W8A8 only (int8.hpp): quantized GEMM inputs, offset by 128, and their per-row scales.
  AlignedVector<std::uint8_t> xq, hq, xg;  // xg: the quantized inputs in sorted order (AMX)
  AlignedVector<std::uint16_t> a16, h16;   // bf16 GEMM inputs in sorted order (AMX)
  std::vector<std::uint8_t> one_term;      // [blocks] split GEMM 1 inputs whose lo terms are all zero (AMX)
  AlignedVector<std::uint16_t> t16;        // quantized GEMM 1 inputs per token (AMX, W8A8 and W4A4)
  std::vector<float> t_scales;             // and their scales
  // int8 GEMM 1 by block (detail::gemm1_by_block): per pipeline worker, a block's gathered input
  // rows and its fp32 activations.
  AlignedVector<std::uint8_t> block_in;
  AlignedVector<float> block_act;
  std::vector<float> hs;
  std::vector<const std::uint8_t*> aq_rows;
  std::vector<float> a_scales;
};

/// Packed weights (PackedExperts<W>, QPackedExperts<F> or Int8PackedExperts) and the workspace of
/// one layer. `run` is const, the workspace is mutable: one layer is not run from two threads at
/// once (MoeLayer's documented rule).
template <class Packed>
struct Prepared {
  Packed packed;
  mutable Workspace workspace;
};

/// What a scheme does to the GEMM inputs (the activation quantization of its quant policy):
/// keep them (fp32 and weight-only schemes), round them to bf16 (fused into the epilogue), or
/// quantize each row as the quant policy's quantize_activation does.
struct keep_inputs {
  static constexpr bool round_bf16 = false, per_row = false;
  static void row(std::span<float>) noexcept {}
};
struct bf16_inputs {
  static constexpr bool round_bf16 = true, per_row = false;
  static void row(std::span<float>) noexcept {}
};
template <class Q>
struct quantized_inputs {
  static constexpr bool round_bf16 = false, per_row = true;
  static void row(std::span<float> r) noexcept { Q::quantize_activation(r); }
};

namespace detail {

#if defined(POLYMOE_TILED_AVX512)
/// block_times_panel for bf16 blocks of more than max_tile_rows rows: row groups of up to
/// max_tall_rows rows, cut evenly, each against both halves of a slab in turn; the 2·groups
/// passes over a slab share the prefetch of the next one.
template <class RowOf>
inline void tall_block_times_panel(index_t m, RowOf row, index_t K, const std::uint16_t* panel, float* c) {
  constexpr index_t kb = k_block<std::uint16_t>, half = panel_cols / 2;
  const index_t groups = (m + max_tall_rows - 1) / max_tall_rows, passes = 2 * groups;
  const float* rows[max_tall_rows];
  for (index_t k0 = 0; k0 < K; k0 += kb) {
    const index_t k1 = std::min(K, k0 + kb);
    const char* next = reinterpret_cast<const char*>(panel + k1 * panel_cols);  // past the end: the next panel
    for (index_t g = 0; g < groups; ++g) {
      const index_t r0 = g * m / groups, n = (g + 1) * m / groups - r0;
      for (index_t i = 0; i < n; ++i) rows[i] = row(r0 + i);
      for (index_t h = 0; h < 2; ++h)
        tall_rows(static_cast<int>(n), rows, k0, k1, panel + h * half, c + r0 * panel_cols + h * half, k0 > 0, next,
                  2 * g + h, passes);
    }
  }
}
#endif

/// Runs the tiles of rows [0, m) of a row block against one panel; `row(i)` is the i-th input row.
/// Leaves the results in c[m][64].
template <class W, class RowOf>
inline void block_times_panel(index_t m, RowOf row, index_t K, const W* panel, float* c) {
  const float* rows[max_tile_rows];
  if (m <= decode_rows) {
    for (index_t i = 0; i < m; ++i) rows[i] = row(i);
    if (m == 1)
      decode_tile<1>(rows, K, panel, c);
    else
      decode_tile<2>(rows, K, panel, c);
    return;
  }
  constexpr auto row_bytes = static_cast<index_t>(panel_cols * sizeof(W));
#if defined(POLYMOE_TILED_AVX512) && POLYMOE_TILED_TALL
  if constexpr (std::is_same_v<W, std::uint16_t>)
    if (m > max_tile_rows) return tall_block_times_panel(m, row, K, panel, c);
#endif
  for (index_t k0 = 0; k0 < K; k0 += k_block<W>) {
    const index_t k1 = std::min(K, k0 + k_block<W>);
    for (index_t r0 = 0; r0 < m; r0 += max_tile_rows) {
      const int n = static_cast<int>(std::min<index_t>(max_tile_rows, m - r0));
      for (int i = 0; i < n; ++i) rows[i] = row(r0 + i);
      // The first tile of a slab fetches the next slab (past the panel's end: the next panel).
      tile_rows(n, rows, k0, k1, panel, c + r0 * panel_cols, k0 > 0,
                r0 == 0 ? reinterpret_cast<const char*>(panel + k1 * panel_cols) : nullptr, row_bytes);
    }
  }
}

/// The same for a quantized panel: widened in registers for one or two rows (decode) and for three
/// or four (qtile: the bits of the slab path), else a slab at a time into an L1 buffer that all the
/// block's tiles share (see qpanel.hpp).
template <class F, class RowOf>
inline void block_times_panel(index_t m, RowOf row, index_t K, const QPanel<F>& panel, float* c) {
  const float* rows[max_tile_rows];
#if defined(POLYMOE_TILED_AVX512)
  if (m <= max_qtile_rows) {
    for (index_t i = 0; i < m; ++i) rows[i] = row(i);
    if (m == 1)
      decode_qtile<1>(rows, K, panel, c);
    else if (m == 2)
      decode_qtile<2>(rows, K, panel, c);
    else if (m == 3)
      qtile<3>(rows, K, panel, c);
    else
      qtile<4>(rows, K, panel, c);
    return;
  }
#endif
  constexpr index_t kb = k_block<float>;
  alignas(64) float slab[kb * panel_cols];
  for (index_t k0 = 0; k0 < K; k0 += kb) {
    const index_t k1 = std::min(K, k0 + kb);
    expand(panel, k0, k1, slab);
    for (index_t r0 = 0; r0 < m; r0 += max_tile_rows) {
      const int n = static_cast<int>(std::min<index_t>(max_tile_rows, m - r0));
      for (int i = 0; i < n; ++i) rows[i] = row(r0 + i) + k0;
      tile_rows(n, rows, 0, k1 - k0, slab, c + r0 * panel_cols, k0 > 0, nullptr, 0);
    }
  }
}

#if defined(POLYMOE_TILED_AVX512)
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
#if defined(POLYMOE_TILED_AVX512)
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
#if defined(POLYMOE_TILED_AVX512)
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

/// The slot a task body gets outside pipelined_tasks (parallel_tasks): none.
inline constexpr std::size_t no_slot = static_cast<std::size_t>(-1);

/// Who runs a task body: the pipeline worker's slot (below pipeline_workers(); no_slot outside
/// the pipeline) and, in a timed pipeline, the worker's thread-nanoseconds per
/// PhaseTimes::task_kind, which the TaskClocks inside the body charge (nullptr: not timed).
struct worker {
  std::size_t slot = no_slot;
  std::int64_t* task_ns = nullptr;
};

/// Calls a task body as body(task, next, w) when it takes the worker, else as body(task, next).
template <class F>
inline void call_task(F& body, const Task& t, const Task* next, const worker& w) {
  if constexpr (std::is_invocable_v<F&, const Task&, const Task*, const worker&>)
    body(t, next, w);
  else
    body(t, next);
}

/// Calls a block_done as done(b, w) when it takes the worker, else as done(b).
template <class Done>
inline void call_done(Done& done, index_t b, const worker& w) {
  if constexpr (std::is_invocable_v<Done&, index_t, const worker&>)
    done(b, w);
  else
    done(b);
}

/// body(task, next) for every task, in parallel ranges of consecutive tasks; `next` is the task
/// the same thread runs after this one (nullptr at the end of its range), whose weights the AMX
/// loop starts fetching during this task's last slab (amx::kblock_ahead).
template <class F>
inline void parallel_tasks(const std::vector<Task>& tasks, F&& body) {
  kernels::parallel_for(tbb::blocked_range<std::size_t>(0, tasks.size()), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i != r.end(); ++i)
      call_task(body, tasks[i], i + 1 != r.end() ? &tasks[i + 1] : nullptr, worker{});
  });
}

/// The workers of pipelined_tasks: the threads the arena and tbb::global_control allow.
inline std::size_t pipeline_workers() noexcept {
  const int arena = std::max(1, tbb::this_task_arena::max_concurrency());
  return std::max<std::size_t>(1, std::min<std::size_t>(static_cast<std::size_t>(arena),
                                                        tbb::global_control::active_value(
                                                            tbb::global_control::max_allowed_parallelism)));
}

/// Whether a layer that may pipeline its GEMMs does: unless tuning::pipeline is off, which runs
/// them as phases.
inline bool pipeline_on(bool pipelined, const tuning& tune) noexcept { return pipelined && tune.pipeline; }

/// Whether GEMM 1 in kernel::tiled_amx runs one task per row block, all of the block's panels in
/// turn (gemm1_panels_interleaved: each panel's epilogue inside the next panel's tiles), instead
/// of one task per (block, panel). int8's task also gathers the block's quantized input rows from
/// the per-token rows into its worker's buffer (Workspace::block_in) and keeps the block's fp32
/// activations in another (block_act) until it quantizes them into GEMM 2's rows, so that neither
/// the inputs in sorted order (N rows, 35 MB at T = 2048 on Qwen3-30B-A3B) nor the fp32
/// activations [N, I] (50 MB) are written to memory and read back. It needs the pipeline's worker
/// slots (pipeline_on), and enough rows per block: with few, a task per block leaves threads idle
/// (decode: 8 blocks at T = 1) and there is little to save. Measured on the 16-core device machine
/// (Qwen3-30B-A3B, 128 experts, paired A B B A rounds; docs/decisions.md#gemm1-by-block), time by
/// panel over time by block: int8 before the interleaved epilogues, 16 and more rows per block on
/// average (T = 256, 512, 2048) 1.10-1.47 in all eight rounds; 8 and fewer (T = 1-128) 0.84-1.05
/// in the quieter rounds of 41 forwards (T = 16-128), decode 0.68 and 0.70; at 2 threads, T = 512
/// and 2048, 0.90-1.24 in three rounds, unresolved. With the interleaved epilogues (medians of 7
/// rounds): int8 1.125 at T = 512 and 1.099 at T = 2048, bf16 1.049 and 1.018 (bf16 had gained
/// nothing from by block without them: 0.96-1.00).
/// `choice` (tuning::gemm1_by_block) off / on turns it off / on wherever the pipeline runs.
inline bool gemm1_by_block(bool pipeline, index_t rows, std::size_t blocks, mode choice) noexcept {
  constexpr index_t rows_per_block = 16;
  if (!pipeline) return false;
  if (choice != mode::automatic) return choice == mode::on;
  return rows >= rows_per_block * static_cast<index_t>(blocks);
}

/// GEMM 1 of a row block by block (gemm1_by_block): panels 0 .. panels − 1 in turn, tiles(cb, c,
/// side) computing panel cb into c, one of two buffers, and finish(cb, c, i) the epilogue of its
/// row i. Each panel's epilogue runs row by row inside the next panel's tiles, called between
/// their k-blocks (side, amx::block22_side: vector work while the tiles compute), and what is left
/// of it after them; the last panel's after its tiles. Measured on the 16-core device machine (int8,
/// Qwen3-30B-A3B, T = 2048, invocations alternating with the build that finished each panel after
/// its tiles; docs/decisions.md#gemm1-epilogue-interleaved): GEMM 1's tasks 10-17 % less
/// thread-time, of their 32-33 thread-ms of epilogue 1.7-1.9 left after the tiles. (Tried first in
/// a separate program: a row every k-block paid, a row every fourth did not.) What is left after
/// the tiles is charged to gemm1_epilogue of `task_ns` (nullptr: not timed).
template <class C, class Tiles, class Finish>
inline void gemm1_panels_interleaved(index_t panels, index_t rows, C* buf0, C* buf1, std::int64_t* task_ns,
                                     Tiles tiles, Finish finish) {
  index_t pending = -1, next_row = rows;  // the panel whose epilogue is under way, its next row
  C* pc = nullptr;
  const auto side = [&] {
    if (next_row < rows) finish(pending, pc, next_row++);
  };
  const auto rest = [&] {
    const TaskClock clock(task_ns, PhaseTimes::gemm1_epilogue);
    while (next_row < rows) finish(pending, pc, next_row++);
  };
  for (index_t cb = 0; cb < panels; ++cb) {
    C* c = cb % 2 == 0 ? buf0 : buf1;
    tiles(cb, c, side);
    rest();
    pending = cb, pc = c, next_row = 0;
  }
  rest();
}

/// GEMM 1's tasks, `block_done(b)` once per row block b after all of its GEMM 1 tasks, and GEMM
/// 2's tasks, run as one stream without a barrier between the GEMMs: every thread claims the next
/// task from an atomic cursor (GEMM 1's in make_tasks order, then GEMM 2's); a GEMM 2 task waits
/// until its block is done, and the thread that finishes a block's last GEMM 1 task runs
/// block_done for it (per-row work between the GEMMs: the int8 quantization of the activations,
/// on rows still in cache). Threads that run out of GEMM 1 go on to GEMM 2 of finished blocks
/// instead of waiting for the slowest thread of GEMM 1, which on a shared machine (and for
/// decode, where a phase is tens of tasks a thread) is a large part of a phase. Measured on the
/// device machine (16 threads, Qwen3-30B-A3B, alternating with the pipeline off, with which
/// run_gemms runs the phases instead): bf16 decode 0.632 and 0.672 ms against 0.680 and 0.855; prefill not told
/// apart from the run-to-run spread (docs/decisions.md#pipeline).
///
/// No deadlock: tasks are claimed in order (runs of consecutive tasks, none across the end of GEMM
/// 1), so every GEMM 1 task that a GEMM 2 task waits for has been claimed by a thread that runs
/// it, or is running earlier tasks of its claim that wait for nothing; with one thread,
/// all of GEMM 1 runs before GEMM 2. gemm1 and gemm2 are called as parallel_tasks' body, with the
/// next task of the thread's claim, and (call_task, call_done) the worker: no two tasks that run
/// at once have the same slot, and every slot is below pipeline_workers(). Each output element is
/// still computed by one task in a fixed order: the result does not depend on the thread count or
/// on which thread ran what.
///
/// With `timed` (the forward records its phases), each worker's thread-time per kind of work
/// (PhaseTimes::task_kind) goes into timed's task_seconds, charged by TaskClocks into the worker's
/// task_ns and summed at its end.
template <class F1, class Done, class F2>
inline void pipelined_tasks(const std::vector<RowBlock>& blocks, const std::vector<Task>& tasks13, index_t panels13,
                            const std::vector<Task>& tasks2, Workspace::Counters& counters, F1&& gemm1,
                            Done&& block_done, F2&& gemm2, PhaseTimes* timed = nullptr) {
  const std::size_t n1 = tasks13.size(), n = n1 + tasks2.size();
  // per block: GEMM 1 tasks still to finish, + 1 until block_done has run; 0 = ready for GEMM 2
  std::atomic<std::int32_t>* const pending = counters.at_least(blocks.size());
  for (std::size_t b = 0; b < blocks.size(); ++b)
    pending[b].store(static_cast<std::int32_t>(panels13) + 1, std::memory_order_relaxed);
  std::atomic<std::size_t> cursor{0};
  const std::size_t threads = pipeline_workers();
  std::array<std::atomic<std::int64_t>, PhaseTimes::task_kinds> total_ns{};
  // task i on worker `w`, `last` the end of the thread's claim (the next task it runs, if
  // i + 1 < last)
  const auto run = [&](std::size_t i, std::size_t last, const worker& w) {
    const bool more = i + 1 < last;
    if (i < n1) {
      const Task& t = tasks13[i];
      {
        const TaskClock clock(w.task_ns, PhaseTimes::gemm1_tasks);
        call_task(gemm1, t, more ? &tasks13[i + 1] : nullptr, w);
      }
      std::atomic<std::int32_t>& p = pending[static_cast<std::size_t>(t.block)];
      if (p.fetch_sub(1, std::memory_order_acq_rel) == 2) {  // the block's last GEMM 1 task
        const TaskClock clock(w.task_ns, PhaseTimes::block_work);
        call_done(block_done, static_cast<index_t>(t.block), w);
        p.store(0, std::memory_order_release);
      }
    } else {
      const Task& t = tasks2[i - n1];
      const std::atomic<std::int32_t>& p = pending[static_cast<std::size_t>(t.block)];
      {
        const TaskClock clock(w.task_ns, PhaseTimes::waiting);
        while (p.load(std::memory_order_acquire) != 0) spin_pause();
      }
      const TaskClock clock(w.task_ns, PhaseTimes::gemm2_tasks);
      call_task(gemm2, t, more ? &tasks2[i + 1 - n1] : nullptr, w);
    }
  };
  using clock = std::chrono::steady_clock;
  const clock::time_point start = timed ? clock::now() : clock::time_point{};
  // Guided claims: a run of consecutive tasks, 1 / (2 · threads) of what is left of the current
  // GEMM (at least one), so that a thread keeps an expert's A rows and panels while there is much
  // to do, and the last claims are single tasks (one task per claim lost the locality that
  // parallel_tasks' ranges have: prefill ran up to 20 % slower than the phases on the device
  // machine, in two alternating pairs; docs/decisions.md#pipeline).
  // (the worker's slot: the first index of its range, which no other running worker holds)
  kernels::parallel_for(tbb::blocked_range<std::size_t>(0, threads, 1), [&](const tbb::blocked_range<std::size_t>& r) {
    std::int64_t local[PhaseTimes::task_kinds] = {};
    const worker w{r.begin(), timed ? local : nullptr};
    std::size_t c = cursor.load(std::memory_order_relaxed);
    while (c < n) {
      const std::size_t end = c < n1 ? n1 : n;
      const std::size_t take = std::max<std::size_t>(1, (end - c) / (2 * threads));
      if (!cursor.compare_exchange_weak(c, c + take, std::memory_order_relaxed)) continue;
      for (std::size_t i = c; i != c + take; ++i) run(i, c + take, w);
      c = cursor.load(std::memory_order_relaxed);
    }
    if (timed) {
      for (int kind = 0; kind < PhaseTimes::task_kinds; ++kind)
        total_ns[static_cast<std::size_t>(kind)].fetch_add(local[kind], std::memory_order_relaxed);
    }
  });
  if (timed) {
    for (int kind = 0; kind < PhaseTimes::task_kinds; ++kind)
      timed->task_seconds[static_cast<std::size_t>(kind)] +=
          1e-9 * static_cast<double>(total_ns[static_cast<std::size_t>(kind)].load());
    timed->worker_seconds += static_cast<double>(threads) * std::chrono::duration<double>(clock::now() - start).count();
  }
}

/// GEMM 1's tasks, `block_done(b)` for every row block (nullptr: nothing between the GEMMs), and
/// GEMM 2's tasks: as one pipeline when `pipelined` (pipelined_tasks; the time charged to `gemms`),
/// else as phases (gemm1, act when there is a block_done, gemm2). With tuning::pipeline off (for
/// measuring the pipeline) a pipelined layer's GEMMs run as phases, still charged to `gemms`.
template <class F1, class Done, class F2>
inline void run_gemms(bool pipelined, const tuning& tune, PhaseClock& clock, const std::vector<RowBlock>& blocks,
                      const std::vector<Task>& tasks13, index_t panels13, const std::vector<Task>& tasks2,
                      Workspace::Counters& counters, F1&& gemm1, Done&& block_done, F2&& gemm2) {
  constexpr bool has_done = !std::is_same_v<std::decay_t<Done>, std::nullptr_t>;
  if (pipeline_on(pipelined, tune)) {
    const auto done = [&](index_t b, const worker& w) {
      if constexpr (has_done) call_done(block_done, b, w);
    };
    pipelined_tasks(blocks, tasks13, panels13, tasks2, counters, gemm1, done, gemm2, clock.sink());
    return clock.lap(PhaseTimes::gemms);
  }
  const auto lap = [&](PhaseTimes::phase p) {
    if (!pipelined) clock.lap(p);
  };
  parallel_tasks(tasks13, gemm1);
  lap(PhaseTimes::gemm1);
  if constexpr (has_done) {
    kernels::parallel_for(tbb::blocked_range<std::size_t>(0, blocks.size()), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t b = r.begin(); b != r.end(); ++b) call_done(block_done, static_cast<index_t>(b), worker{});
    });
    lap(PhaseTimes::act);
  }
  parallel_tasks(tasks2, gemm2);
  clock.lap(pipelined ? PhaseTimes::gemms : PhaseTimes::gemm2);
}

}  // namespace detail

/// Checks the shapes of a forward's operands and sorts its pairs by expert into row blocks cut as
/// `cut` says.
inline void begin_forward(const DispatchOutput<format::standard>& d, const ExpertShape& s, MatrixRef out,
                          Workspace& ws, BlockCut cut = {block_rows}) {
  const index_t T = d.hidden.rows(), k = d.ids.cols(), H = s.hidden;
  require(d.hidden.cols() == H, "tiled kernel: hidden has ", d.hidden.cols(), " columns, weights expect ", H);
  require(out.rows() == T && out.cols() == H, "tiled kernel: output is [", out.rows(), ", ", out.cols(),
          "], expected [", T, ", ", H, "]");
  require(d.ids.rows() == T && d.weights.rows() == T && d.weights.cols() == k, "tiled kernel: ids are [",
          d.ids.rows(), ", ", k, "] and weights [", d.weights.rows(), ", ", d.weights.cols(), "] for ", T, " tokens");
  sort_by_expert(d.ids, s.experts, cut, ws.sorted);
  const ExpertRows& sr = ws.sorted;
  ws.row_weight.resize(static_cast<std::size_t>(sr.rows()));
  for (index_t t = 0; t < T; ++t)  // in slot order, as the sort: no division by k
    for (index_t j = 0; j < k; ++j)
      if (const index_t row = sr.row_of[static_cast<std::size_t>(t * k + j)]; row >= 0)
        ws.row_weight[static_cast<std::size_t>(row)] = d.weights(t, j);
}

/// out[t] = sum over slots j, in slot order, of y[row_of(t, j)] (fp32). Each token's columns in
/// steps of `step` columns (tuning::sum_span; at least 1), all of its slots in turn (each element:
/// the same additions in the same order at any step).
///
/// The step keeps k streams of y in flight at once rather than one; y is read from memory
/// (streamed: stream_y) at the prefill sizes, where the sum is a phase of its own after the
/// pipeline. Measured on the 16-core device machine (Qwen3-30B-A3B, 16 threads, the sum phase of
/// polymoe_bench --phases in invocations alternating the span; docs/decisions.md#sum-span): whole
/// rows (8 KiB each) 0.43-1.06 ms at T=512 and 1.54-2.24 at T=2048, 64 columns 0.33-0.39 and
/// 1.17-1.35, 256 columns in between; 16 to 128 columns were not told apart. The forward, 5-10 % of
/// which is the sum, moved by less than the paired rounds resolve (bench_ratio --ab sum-span:
/// 0.99-1.03).
inline void sum_slots(const ExpertRows& sr, const AlignedVector<float>& y, index_t k, MatrixRef out, index_t step) {
  const index_t T = out.rows(), H = out.cols(), span = std::max<index_t>(1, step);
  kernels::parallel_for(tbb::blocked_range<index_t>(0, T, 8), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t t = r.begin(); t != r.end(); ++t) {
      float* o = out.row(t).data();
      const index_t* rows = sr.row_of.data() + t * k;
      for (index_t c0 = 0; c0 < H; c0 += span) {
        const index_t n = std::min(span, H - c0);
        float* oc = o + c0;
        std::fill_n(oc, n, 0.0f);
        for (index_t j = 0; j < k; ++j) {
          if (rows[j] < 0) continue;
          const float* yr = y.data() + rows[j] * H + c0;
          for (index_t c = 0; c < n; ++c) oc[c] += yr[c];
        }
      }
    }
  });
}

/// out[t] = sum_j w[t,j] · expert_{id[t,j]}(x[t]). Act says what the scheme does to each GEMM
/// input row (keep_inputs, bf16_inputs, quantized_inputs<Q>); Packed is PackedExperts<W> or
/// QPackedExperts<F>. `tune`: the kernel's tuning; `phases`: where the forward records its phase
/// times (nullptr: nowhere).
template <class Act, class Packed>
void forward_standard(const DispatchOutput<format::standard>& d, const Prepared<Packed>& p, const ExpertMlp& mlp,
                      MatrixRef out, const tuning& tune, PhaseTimes* phases) {
  const Packed& pk = p.packed;
  Workspace& ws = p.workspace;
  const ExpertShape& s = pk.shape;
  const index_t T = d.hidden.rows(), k = d.ids.cols(), H = s.hidden, I = s.intermediate;
  PhaseClock clock(phases);
  begin_forward(d, s, out, ws);
  const ExpertRows& sr = ws.sorted;
  const index_t N = sr.rows();
  constexpr bool RoundBf16 = Act::round_bf16;
  clock.lap(PhaseTimes::sort);

  // Input rows: the caller's rows when the scheme keeps them as they are, else rounded copies
  // (one per token, or one per pair when the routing weight scales the input).
  ws.a_rows.resize(static_cast<std::size_t>(N));
  if (mlp.weight_on_input) {
    ws.x.resize(static_cast<std::size_t>(N * H));
    kernels::parallel_for(tbb::blocked_range<index_t>(0, N, 16), [&](const tbb::blocked_range<index_t>& r) {
      for (index_t n = r.begin(); n != r.end(); ++n) {
        const index_t slot = sr.slot_of[static_cast<std::size_t>(n)];
        const float wt = ws.row_weight[static_cast<std::size_t>(n)];
        const float* src = d.hidden.row(slot / k).data();
        float* dst = ws.x.data() + n * H;
        for (index_t c = 0; c < H; ++c) dst[c] = src[c] * wt;
        if constexpr (RoundBf16) round_bf16(dst, H);
        Act::row(std::span<float>(dst, static_cast<std::size_t>(H)));
        ws.a_rows[static_cast<std::size_t>(n)] = dst;
      }
    });
  } else if constexpr (RoundBf16 || Act::per_row) {
    ws.x.resize(static_cast<std::size_t>(T * H));
    kernels::parallel_for(tbb::blocked_range<index_t>(0, T, 16), [&](const tbb::blocked_range<index_t>& r) {
      for (index_t t = r.begin(); t != r.end(); ++t) {
        std::copy_n(d.hidden.row(t).data(), H, ws.x.data() + t * H);
        if constexpr (RoundBf16) round_bf16(ws.x.data() + t * H, H);
        Act::row(std::span<float>(ws.x.data() + t * H, static_cast<std::size_t>(H)));
      }
    });
    for (index_t n = 0; n < N; ++n) ws.a_rows[static_cast<std::size_t>(n)] = ws.x.data() + (sr.slot_of[static_cast<std::size_t>(n)] / k) * H;
  } else {
    for (index_t n = 0; n < N; ++n) ws.a_rows[static_cast<std::size_t>(n)] = d.hidden.row(sr.slot_of[static_cast<std::size_t>(n)] / k).data();
  }

  clock.lap(PhaseTimes::inputs);

  // GEMM 1 + activation.
  ws.act.resize(static_cast<std::size_t>(N * I));
  make_tasks(sr, pk.panels13, ws.tasks13);
  detail::parallel_tasks(ws.tasks13, [&](const Task& task, const Task*) {
    alignas(64) float c[block_rows * panel_cols];
    const RowBlock& b = sr.block(task);
    const index_t cb = task.panel;
    detail::block_times_panel(b.rows, [&](index_t i) { return ws.a_rows[static_cast<std::size_t>(b.begin + i)]; }, H,
                              pk.panel13(b.expert, cb), c);
    detail::finish13<RoundBf16>(mlp, pk, b, cb, c, ws.act.data(), I);
  });
  clock.lap(PhaseTimes::gemm1);

  if constexpr (Act::per_row)
    kernels::parallel_for(tbb::blocked_range<index_t>(0, N, 16), [&](const tbb::blocked_range<index_t>& r) {
      for (index_t n = r.begin(); n != r.end(); ++n)
        Act::row(std::span<float>(ws.act.data() + n * I, static_cast<std::size_t>(I)));
    });
  clock.lap(PhaseTimes::act);

  // GEMM 2, bias and routing weight.
  ws.y.resize(static_cast<std::size_t>(N * H));
  const bool stream =
      detail::stream_y(ws.y.size() * sizeof(float), sr.experts_with_rows(), pk.expert_bytes(), tune.y_stream);
  make_tasks(sr, pk.panels2, ws.tasks2);
  detail::parallel_tasks(ws.tasks2, [&](const Task& task, const Task*) {
    alignas(64) float c[block_rows * panel_cols];
    const RowBlock& b = sr.block(task);
    const index_t cb = task.panel;
    detail::block_times_panel(b.rows, [&](index_t i) { return ws.act.data() + (b.begin + i) * I; }, I,
                              pk.panel2(b.expert, cb), c);
    detail::finish2(mlp, pk, b, cb, c, ws.row_weight.data(), ws.y.data(), stream, nullptr);
  });
  clock.lap(PhaseTimes::gemm2);

  // Top-k sum in slot order.
  sum_slots(sr, ws.y, k, out, tune.sum_span);
  clock.lap(PhaseTimes::sum);
}

}  // namespace polymoe::kernels::tiled
