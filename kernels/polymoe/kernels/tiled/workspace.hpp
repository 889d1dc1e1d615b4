// What one layer's forward keeps between calls (Workspace: sorted pairs, GEMM inputs, the
// intermediate and y, grown to the largest batch and reused), the kernel's prepared weights, the
// row-block geometry, and how the unquantized schemes treat a GEMM input row (keep_inputs,
// bf16_inputs).
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_WORKSPACE) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_WORKSPACE
#undef POLYMOE_TILED_GUARD_WORKSPACE
#else
#define POLYMOE_TILED_GUARD_WORKSPACE
#endif
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include <polymoe/core/formats.hpp>
#include <polymoe/kernels/tiled/buffer.hpp>
#include <polymoe/kernels/tiled/phases.hpp>
#include <polymoe/kernels/tiled/prepack.hpp>
#include <polymoe/kernels/tiled/qpanel.hpp>
#include <polymoe/kernels/tiled/sort.hpp>
#include <polymoe/kernels/tiled/tuning.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

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
/// keep them (fp32 and weight-only schemes), or round them to bf16 (fused into the epilogue); the
/// schemes that quantize each row (`row`, as the quant policy's quantize_activation) have theirs in
/// act_quant.hpp.
struct keep_inputs {
  static constexpr bool round_bf16 = false, per_row = false;
  static void row(std::span<float>) noexcept {}
};
struct bf16_inputs {
  static constexpr bool round_bf16 = true, per_row = false;
  static void row(std::span<float>) noexcept {}
};

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_WORKSPACE
