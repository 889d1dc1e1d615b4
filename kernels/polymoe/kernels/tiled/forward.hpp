// The tiled kernel's forward pass on the standard format:
//
//   1. sort the (token, slot) pairs by expert into row blocks              (sort.hpp)
//   2. GEMM 1 over the grid (row block x w13 panel), all experts at once:
//      pre = x · W13ᵀ + b13, h = act(gate, up) rounded as the scheme says   (panel_products.hpp,
//                                                                             finish.hpp)
//   3. GEMM 2 over the grid (row block x w2 panel): y = (h · W2ᵀ + b2) · w  (routing weight here,
//      or on the input when ExpertMlp::weight_on_input); the tasks of both run as schedule.hpp says
//   4. out[t] = sum over slots j, in slot order, of y[row_of(t, j)]         (fp32, topk_sum.hpp)
//
// Every output element is computed by one task with a fixed k order and the top-k sum runs in slot
// order, so the result is bitwise independent of the thread count. All buffers live in a
// Workspace (workspace.hpp) that grows to the largest batch seen and is reused: after warm-up a forward allocates
// nothing.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_FORWARD) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_FORWARD
#undef POLYMOE_TILED_GUARD_FORWARD
#else
#define POLYMOE_TILED_GUARD_FORWARD
#endif
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <polymoe/core/error.hpp>
#include <polymoe/core/formats.hpp>
#include <polymoe/kernels/tiled/finish.hpp>
#include <polymoe/kernels/tiled/panel_products.hpp>
#include <polymoe/kernels/tiled/phases.hpp>
#include <polymoe/kernels/tiled/schedule.hpp>
#include <polymoe/kernels/tiled/sort.hpp>
#include <polymoe/kernels/tiled/topk_sum.hpp>
#include <polymoe/kernels/tiled/tuning.hpp>
#include <polymoe/kernels/tiled/workspace.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

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


/// The one forward of the tiled kernels, whatever the scheme: check and sort the pairs into row
/// blocks cut as `cut` says (begin_forward), the pass's input rows (`inputs(sr)`), its two GEMMs
/// and the step between them, then the slot-order top-k sum of y into out. `gemms(sr, stream, run)`
/// builds the pass's GEMM 1 task body, its step for a row block whose GEMM 1 is done (nullptr:
/// none) and its GEMM 2 task body (`stream`: whether GEMM 2 stores y past the caches), and hands
/// them to `run(pipelined, panels13, panels2, gemm1, between, gemm2)`, which makes the tasks and
/// runs them as detail::run_gemms says (one pipeline, or phases). `expert_bytes`: one expert's
/// packed weights (the y-streaming rule). The passes differ only in these parts: forward_standard
/// below, forward_int8 (int8.hpp), forward_amx_bf16 (amx_forward.hpp), forward_amx_decoded
/// (amx_decoded.hpp).
template <class Inputs, class Gemms>
void forward_skeleton(const DispatchOutput<format::standard>& d, const ExpertShape& s, std::size_t expert_bytes,
                      MatrixRef out, Workspace& ws, BlockCut cut, const tuning& tune, PhaseTimes* phases,
                      Inputs&& inputs, Gemms&& gemms) {
  PhaseClock clock(phases);
  begin_forward(d, s, out, ws, cut);
  const ExpertRows& sr = ws.sorted;
  clock.lap(PhaseTimes::sort);
  inputs(sr);
  clock.lap(PhaseTimes::inputs);
  ws.y.resize(static_cast<std::size_t>(sr.rows() * s.hidden));
  const bool stream =
      detail::stream_y(ws.y.size() * sizeof(float), sr.experts_with_rows(), expert_bytes, tune.y_stream);
  gemms(sr, stream, [&](bool pipelined, index_t panels13, index_t panels2, auto&& gemm1, auto&& between, auto&& gemm2) {
    make_tasks(sr, panels13, ws.tasks13);
    make_tasks(sr, panels2, ws.tasks2);
    detail::run_gemms(pipelined, tune, clock, sr.blocks, ws.tasks13, panels13, ws.tasks2, ws.pending, gemm1, between,
                      gemm2);
  });
  sum_slots(sr, ws.y, d.ids.cols(), out, tune.sum_span);
  clock.lap(PhaseTimes::sum);
}

/// out[t] = sum_j w[t,j] · expert_{id[t,j]}(x[t]). Act says what the scheme does to each GEMM
/// input row (keep_inputs, bf16_inputs, e4m3_inputs, nvfp4_w4a4_inputs); Packed is PackedExperts<W> or
/// QPackedExperts<F>. `tune`: the kernel's tuning; `phases`: where the forward records its phase
/// times (nullptr: nowhere). The GEMMs run as phases (GEMM 1 with its activation, the scheme's
/// rounding of the activations, GEMM 2).
template <class Act, class Packed>
void forward_standard(const DispatchOutput<format::standard>& d, const Prepared<Packed>& p, const ExpertMlp& mlp,
                      MatrixRef out, const tuning& tune, PhaseTimes* phases) {
  const Packed& pk = p.packed;
  Workspace& ws = p.workspace;
  const ExpertShape& s = pk.shape;
  const index_t T = d.hidden.rows(), k = d.ids.cols(), H = s.hidden, I = s.intermediate;
  constexpr bool RoundBf16 = Act::round_bf16;

  // Input rows: the caller's rows when the scheme keeps them as they are, else rounded copies
  // (one per token, or one per pair when the routing weight scales the input).
  const auto inputs = [&](const ExpertRows& sr) {
    const index_t N = sr.rows();
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
      for (index_t n = 0; n < N; ++n)
        ws.a_rows[static_cast<std::size_t>(n)] = ws.x.data() + (sr.slot_of[static_cast<std::size_t>(n)] / k) * H;
    } else {
      for (index_t n = 0; n < N; ++n)
        ws.a_rows[static_cast<std::size_t>(n)] = d.hidden.row(sr.slot_of[static_cast<std::size_t>(n)] / k).data();
    }
  };

  const auto gemms = [&](const ExpertRows& sr, bool stream, auto&& run) {
    ws.act.resize(static_cast<std::size_t>(sr.rows() * I));
    // GEMM 1 + activation.
    const auto gemm1 = [&](const Task& task, const Task*) {
      alignas(64) float c[block_rows * panel_cols];
      const RowBlock& b = sr.block(task);
      const index_t cb = task.panel;
      detail::block_times_panel<RoundBf16>(b.rows, [&](index_t i) { return ws.a_rows[static_cast<std::size_t>(b.begin + i)]; }, H,
                                           pk.panel13(b.expert, cb), c, tune.short_loops());
      detail::finish13<RoundBf16>(mlp, pk, b, cb, c, ws.act.data(), I);
    };
    // The scheme's rounding of a finished block's activations.
    const auto round_block = [&](index_t block) {
      const RowBlock& b = sr.blocks[static_cast<std::size_t>(block)];
      for (index_t n = b.begin; n < b.begin + b.rows; ++n)
        Act::row(std::span<float>(ws.act.data() + n * I, static_cast<std::size_t>(I)));
    };
    // GEMM 2, bias and routing weight.
    const auto gemm2 = [&](const Task& task, const Task*) {
      alignas(64) float c[block_rows * panel_cols];
      const RowBlock& b = sr.block(task);
      const index_t cb = task.panel;
      detail::block_times_panel<RoundBf16>(b.rows, [&](index_t i) { return ws.act.data() + (b.begin + i) * I; }, I,
                                           pk.panel2(b.expert, cb), c, tune.short_loops());
      detail::finish2(mlp, pk, b, cb, c, ws.row_weight.data(), ws.y.data(), stream, nullptr);
    };
    if constexpr (Act::per_row)
      run(false, pk.panels13, pk.panels2, gemm1, round_block, gemm2);
    else
      run(false, pk.panels13, pk.panels2, gemm1, nullptr, gemm2);
  };
  forward_skeleton(d, s, pk.expert_bytes(), out, ws, BlockCut{block_rows}, tune, phases, inputs, gemms);
}

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_FORWARD
