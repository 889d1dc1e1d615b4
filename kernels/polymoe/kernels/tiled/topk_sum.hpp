// The top-k sum: each token's output is the sum of its slots' rows of y, in slot order.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_TOPK_SUM) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_TOPK_SUM
#undef POLYMOE_TILED_GUARD_TOPK_SUM
#else
#define POLYMOE_TILED_GUARD_TOPK_SUM
#endif
#include <algorithm>

#include <tbb/blocked_range.h>

#include <polymoe/core/types.hpp>
#include <polymoe/kernels/parallel.hpp>
#include <polymoe/kernels/tiled/buffer.hpp>
#include <polymoe/kernels/tiled/sort.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

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

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_TOPK_SUM
