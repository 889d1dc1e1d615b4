// forward_int8: the tiled kernels' forward pass with integer GEMMs (forward_standard's pipeline,
// forward.hpp) on either integer panel: int8 W8A8 (int8.hpp; int32 sums scaled once per row) and
// int4 W4A8 (int4.hpp; fp32 sums scaled per group), both on int8 activations (quantize_row_u8).
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_INT8_FORWARD) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_INT8_FORWARD
#undef POLYMOE_TILED_GUARD_INT8_FORWARD
#else
#define POLYMOE_TILED_GUARD_INT8_FORWARD
#endif
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include <polymoe/kernels/tiled/forward.hpp>
#include <polymoe/kernels/tiled/int4.hpp>
#include <polymoe/kernels/tiled/int8.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

namespace detail {

/// The products of a row block and one panel, int8's or int4's (block_times_i8panel's arguments).
template <class RowOf, class Side = no_side>
inline void block_times_panel(index_t m, RowOf row, index_t K4, const I8Panel& panel, std::int32_t* acc,
                              index_t tile_stride, index_t min_rows, const std::int8_t* next, Side&& side = Side{}) {
  block_times_i8panel(m, row, K4, panel, acc, tile_stride, min_rows, next, std::forward<Side>(side));
}
template <class RowOf, class Side = no_side>
inline void block_times_panel(index_t m, RowOf row, index_t K4, const I4Panel& panel, float* acc, index_t tile_stride,
                              index_t min_rows, const std::uint8_t* next, Side&& side = Side{}) {
  block_times_i4panel(m, row, K4, panel, acc, tile_stride, min_rows, next, std::forward<Side>(side));
}
/// The epilogue of one row of either panel (scale_i8_row's arguments).
inline void scale_panel_row(const std::int32_t* acc, float sr, const I8Panel& panel, const float* bias, float wt,
                            float* d, index_t n, bool stream = false) noexcept {
  scale_i8_row(acc, sr, panel, bias, wt, d, n, stream);
}
inline void scale_panel_row(const float* acc, float sr, const I4Panel& panel, const float* bias, float wt, float* d,
                            index_t n, bool stream = false) noexcept {
  scale_i4_row(acc, sr, panel, bias, wt, d, n, stream);
}

}  // namespace detail

/// The forward pass of forward_standard (see forward.hpp) with int8 GEMMs, on Int8PackedExperts or
/// Int4PackedExperts; `tune` and `phases` as forward_standard's.
template <class Packed>
void forward_int8(const DispatchOutput<format::standard>& d, const Prepared<Packed>& p, const ExpertMlp& mlp,
                  MatrixRef out, const tuning& tune, PhaseTimes* phases) {
  using Acc = typename Packed::acc_type;
  using codes_ptr = decltype(std::declval<const Packed&>().panel13(0, 0).codes);
  const Packed& pk = p.packed;
  Workspace& ws = p.workspace;
  const ExpertShape& s = pk.shape;
  const index_t T = d.hidden.rows(), k = d.ids.cols(), H = s.hidden, I = s.intermediate;
  const index_t H4 = pk.kpad(H), I4 = pk.kpad(I);
  const index_t min_rows = tune.tiles_from(amx_min_rows_int8);
  const auto at = [](auto& v, index_t i) -> auto& { return v[static_cast<std::size_t>(i)]; };
  const bool tiles = pk.use_amx;
  const bool pipeline = detail::pipeline_on(pk.pipelined, tune);
  // Row strides of the quantized GEMM inputs (bytes): with tiles, an odd number of cache lines.
  const index_t ldh = tiles ? amx_row_stride_bytes(H4) : H4, ldi = tiles ? amx_row_stride_bytes(I4) : I4;
  constexpr index_t spare = 16;  // rows a 16-row tile may read past the last block
  bool by_block = false;  // GEMM 1 a task per row block (detail::gemm1_by_block), once the blocks are cut

  // Quantized inputs: one per token, or one per pair when the routing weight scales the input.
  const auto inputs = [&](const ExpertRows& sr) {
    const index_t N = sr.rows();
    by_block = detail::gemm1_by_block(pipeline, N, sr.blocks.size(), tune.gemm1_by_block);
    ws.aq_rows.resize(static_cast<std::size_t>(N));
    ws.a_scales.resize(static_cast<std::size_t>(N));
    if (mlp.weight_on_input) {
      ws.x.resize(static_cast<std::size_t>(N * H));
      ws.xq.resize(static_cast<std::size_t>((N + spare) * ldh));
      kernels::parallel_for(tbb::blocked_range<index_t>(0, N, 16), [&](const tbb::blocked_range<index_t>& r) {
        for (index_t n = r.begin(); n != r.end(); ++n) {
          const index_t slot = at(sr.slot_of, n);
          const float wt = ws.row_weight[static_cast<std::size_t>(n)];
          const float* src = d.hidden.row(slot / k).data();
          float* tmp = ws.x.data() + n * H;
          for (index_t c = 0; c < H; ++c) tmp[c] = src[c] * wt;
          at(ws.a_scales, n) = quantize_row_u8(tmp, H, H4, ws.xq.data() + n * ldh);
          at(ws.aq_rows, n) = ws.xq.data() + n * ldh;
        }
      });
    } else {
      // One pass over the tokens: each is quantized once, into its first sorted row (tiles: the
      // rows of a block must lie at one stride, so the token's other rows get copies of it, from
      // L1) or into a row per token that all of its sorted rows point to (also with tiles when
      // GEMM 1 runs by block: its tasks gather their rows).
      const bool sorted_copy = tiles && !by_block;
      if (sorted_copy)
        ws.xg.resize(static_cast<std::size_t>((N + spare) * ldh));
      else
        ws.xq.resize(static_cast<std::size_t>(T * H4));
      kernels::parallel_for(tbb::blocked_range<index_t>(0, T, 16), [&](const tbb::blocked_range<index_t>& r) {
        for (index_t t = r.begin(); t != r.end(); ++t) {
          const std::uint8_t* first = nullptr;
          float scale = 0.0f;
          for (index_t j = 0; j < k; ++j) {
            const index_t n = at(sr.row_of, t * k + j);
            if (n < 0) continue;  // not computed here
            std::uint8_t* dst = sorted_copy ? ws.xg.data() + n * ldh : ws.xq.data() + t * H4;
            if (first == nullptr) {
              scale = quantize_row_u8(d.hidden.row(t).data(), H, H4, dst);
              first = dst;
            } else if (dst != first) {
              std::copy_n(first, H4, dst);
            }
            at(ws.a_scales, n) = scale;
            at(ws.aq_rows, n) = dst;
          }
        }
      });
    }
  };

  const auto gemms = [&](const ExpertRows& sr, bool stream, auto&& run) {
    const index_t N = sr.rows();
    // GEMM 1 + activation (fp32), then the activations quantized per row, then GEMM 2, bias and
    // routing weight: three phases, or (kernel::tiled_amx) one pipeline in which a row block's
    // activations are quantized as soon as its GEMM 1 tasks are done (detail::pipelined_tasks) —
    // or, GEMM 1 by block (detail::gemm1_by_block), by the task that ran them all.
    const index_t in_slot = amx_block_rows * ldh, act_slot = amx_block_rows * I;  // per worker
    if (by_block) {
      const std::size_t workers = detail::pipeline_workers();
      ws.block_in.resize(workers * static_cast<std::size_t>(in_slot));
      ws.block_act.resize(workers * static_cast<std::size_t>(act_slot));
    } else {
      ws.act.resize(static_cast<std::size_t>(N * I));
    }
    ws.hq.resize(static_cast<std::size_t>((N + spare) * ldi));
    ws.hs.resize(static_cast<std::size_t>(N));
    // Panel cb of GEMM 1 for block b (a task of GEMM 1 by panel), into the block's rows of ws.act
    // (`after`: the codes of the panel multiplied next, or nullptr; the epilogue's time charged to
    // `task_ns`, a timed pipeline worker's).
    const auto gemm1_panel = [&](const RowBlock& b, index_t cb, const codes_ptr after, std::int64_t* task_ns) {
      const auto row = [&](index_t i) { return at(ws.aq_rows, b.begin + i); };
      alignas(64) Acc acc[amx_block_rows * panel_cols];
      alignas(64) float c[amx_block_rows * panel_cols];
      const auto panel = pk.panel13(b.expert, cb);
      detail::block_times_panel(b.rows, row, H4, panel, acc, tiles ? ldh : 0, min_rows, after);
      const TaskClock epilogue(task_ns, PhaseTimes::gemm1_epilogue);
      const float* bias = pk.bias13(b.expert, cb);
      for (index_t i = 0; i < b.rows; ++i)
        detail::scale_panel_row(acc + i * panel_cols, at(ws.a_scales, b.begin + i), panel, bias, 1.0f, c + i * panel_cols,
                             panel_cols);
      detail::finish13<false, float, /*AddBias=*/false>(mlp, pk, b, cb, c, ws.act.data(), I);
    };
    const auto quantize_rows = [&](const RowBlock& b, const float* act, std::int64_t* task_ns) {
      const TaskClock clock(task_ns, PhaseTimes::act_quantize);
      for (index_t i = 0; i < b.rows; ++i)
        at(ws.hs, b.begin + i) = quantize_row_u8(act + i * I, I, I4, ws.hq.data() + (b.begin + i) * ldi);
    };
    const auto gemm1 = [&](const Task& task, const Task* next, const detail::worker& w) {
      const RowBlock& b = sr.block(task);
      if (!by_block) {
        gemm1_panel(b, task.panel, next ? pk.panel13(sr.block(*next).expert, next->panel).codes : nullptr, w.task_ns);
        return;
      }
      // (w.slot: by_block implies the pipeline, whose tasks get their worker's slot)
      std::uint8_t* a = ws.block_in.data() + w.slot * static_cast<std::size_t>(in_slot);
      float* act = ws.block_act.data() + w.slot * static_cast<std::size_t>(act_slot);
      for (index_t i = 0; i < b.rows; ++i)
        std::memcpy(a + i * ldh, at(ws.aq_rows, b.begin + i), static_cast<std::size_t>(H4));
      const auto row = [a, ldh](index_t i) -> const std::uint8_t* { return a + i * ldh; };
      // Panel after panel, each panel's epilogue (scaling, bias, activation into the block's act
      // rows) inside the next panel's tiles (detail::gemm1_panels_interleaved).
      alignas(64) Acc acc[2][amx_block_rows * panel_cols];
      detail::gemm1_panels_interleaved(
          pk.panels13, b.rows, acc[0], acc[1], w.task_ns,
          [&](index_t cb, Acc* c, auto& side) {
            const codes_ptr after = cb + 1 < pk.panels13 ? pk.panel13(b.expert, cb + 1).codes
                                       : next               ? pk.panel13(sr.block(*next).expert, 0).codes
                                                            : nullptr;
            detail::block_times_panel(b.rows, row, H4, pk.panel13(b.expert, cb), c, tiles ? ldh : 0, min_rows, after,
                                        side);
          },
          [&](index_t cb, const Acc* c, index_t i) {
            alignas(64) float v[panel_cols];
            detail::scale_panel_row(c + i * panel_cols, at(ws.a_scales, b.begin + i), pk.panel13(b.expert, cb),
                                 pk.bias13(b.expert, cb), 1.0f, v, panel_cols);
            detail::finish13_row<false, /*AddBias=*/false>(mlp, pk, cb, nullptr, v, act + i * I);
          });
      quantize_rows(b, act, w.task_ns);
    };
    const auto quantize_block = [&](index_t block, const detail::worker& w) {
      if (by_block) return;  // done by gemm1
      const RowBlock& b = sr.blocks[static_cast<std::size_t>(block)];
      quantize_rows(b, ws.act.data() + b.begin * I, w.task_ns);
    };
    const auto gemm2 = [&](const Task& task, const Task* next, const detail::worker& w) {
      alignas(64) Acc acc[amx_block_rows * panel_cols];
      const RowBlock& b = sr.block(task);
      const index_t cb = task.panel;
      const auto panel = pk.panel2(b.expert, cb);
      detail::block_times_panel(b.rows, [&](index_t i) { return ws.hq.data() + (b.begin + i) * ldi; }, I4, panel, acc,
                                  tiles ? ldi : 0, min_rows,
                                  next ? pk.panel2(sr.block(*next).expert, next->panel).codes : nullptr);
      // the scaling fused with finish2's bias and routing weight: straight into y
      detail::finish2_rows(mlp, pk, b, cb, ws.row_weight.data(), ws.y.data(), stream, w.task_ns,
                           [&](index_t i, const float* bias, float wt, float* dst, index_t n) {
                             detail::scale_panel_row(acc + i * panel_cols, at(ws.hs, b.begin + i), panel, bias, wt, dst, n,
                                                  stream);
                           });
    };
    run(pk.pipelined, by_block ? 1 : pk.panels13, pk.panels2, gemm1, quantize_block, gemm2);
  };
  forward_skeleton(d, s, pk.expert_bytes(), out, ws, tiles ? BlockCut{amx_block_rows, 16} : BlockCut{block_rows}, tune,
                   phases, inputs, gemms);
}

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_INT8_FORWARD
