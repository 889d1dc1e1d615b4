// kernel::tiled_amx's forward pass for bf16 weights: forward_standard's pipeline (sort, GEMM 1 +
// activation, GEMM 2 + routing weight, slot-order sum; see forward.hpp) with the GEMM inputs kept
// as bf16 rows in sorted order, so that a row block is one strided tile operand, and the weights
// in the tile layout of amx.hpp. Blocks of amx_min_rows_bf16 rows or more (tuning::amx_min_rows
// overrides it) run tdpbf16ps when the layer was prepared with AMX enabled; smaller blocks
// (decode), or every block without AMX, run amx_layout_tile, an AVX-512 loop over the same layout.
// For kernel::tiled_amx the two GEMMs run as one stream of tasks without a barrier between them
// (detail::pipelined_tasks), and with enough rows per block GEMM 1 runs a task per block, each
// panel's epilogue inside the next panel's tiles (detail::gemm1_by_block, gemm1_panels_interleaved).
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_AMX_FORWARD) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_AMX_FORWARD
#undef POLYMOE_TILED_GUARD_AMX_FORWARD
#else
#define POLYMOE_TILED_GUARD_AMX_FORWARD
#endif
#include <algorithm>

#include <polymoe/kernels/tiled/amx.hpp>
#include <polymoe/kernels/tiled/forward.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

namespace detail {

#if POLYMOE_TILED_AVX512
/// The AVX-512 loop over the tile layout that this target runs: vdpbf16ps where it is chosen
/// (POLYMOE_TILED_DPBF16, microkernel.hpp), else widening and FMAs.
template <int MR>
inline void pair_tile(const std::uint16_t* const* a, index_t K, const std::uint16_t* panel, float* c,
                      bool short_loops) noexcept {
#if POLYMOE_TILED_DPBF16
  if constexpr (MR <= decode_rows)
    if (short_loops) return amx_layout_decode_dp<MR>(a, K, panel, c);
  amx_layout_tile_dp<MR>(a, K, panel, c);
#else
  (void)short_loops;
  amx_layout_tile<MR>(a, K, panel, c);
#endif
}
#endif

/// c[m][64] = rows [0, m) of A (bf16, stride lda, padded to an even length) times an AMX-layout
/// panel, without tiles (`short_loops` as block_times_panel's).
inline void amx_layout_rows(index_t m, const std::uint16_t* a, index_t lda, index_t K, const std::uint16_t* panel,
                            float* c, bool short_loops) noexcept {
#if POLYMOE_TILED_AVX512
  const std::uint16_t* rows[max_tile_rows];
  for (index_t r0 = 0; r0 < m; r0 += max_tile_rows) {
    const int n = static_cast<int>(std::min<index_t>(max_tile_rows, m - r0));
    for (int i = 0; i < n; ++i) rows[i] = a + (r0 + i) * lda;
    float* cr = c + r0 * panel_cols;
    with_rows<max_tile_rows>(n, [&]<int M>() { pair_tile<M>(rows, K, panel, cr, short_loops); });
  }
#else
  (void)short_loops;
  for (index_t i = 0; i < m; ++i)
    for (index_t p = 0; p < panel_cols; ++p) {
      float sum = 0.0f;
      for (index_t k = 0; k < K; ++k)
        sum += codecs::bf16_to_float(a[i * lda + k]) * codecs::bf16_to_float(panel[amx_bf16_slot(k, p)]);
      c[i * panel_cols + p] = sum;
    }
#endif
}

/// Rows [0, m) of A times one panel: tiles when enabled and the block has `min_rows` rows or more
/// (`next`: the panel the thread multiplies next, or nullptr; see amx::kblock_ahead; `short_loops`
/// as block_times_panel's). With tiles, side() is called between k-blocks (amx::block22_side),
/// some number of times.
template <class Side = no_side>
inline void amx_block_times_panel(bool tiles, bool short_loops, index_t min_rows, index_t m, const std::uint16_t* a,
                                  index_t lda,
                                  index_t K, const std::uint16_t* panel, const std::uint16_t* next, float* c,
                                  Side&& side = Side{}) noexcept {
#if POLYMOE_TILED_AMX_CODE
  if (tiles && m >= min_rows) return amx::bf16_block(a, lda, m, padded_k32(K), panel, next, c, side);
#else
  (void)tiles;
  (void)min_rows;
  (void)next;
  (void)side;
#endif
  amx_layout_rows(m, a, lda, K, panel, c, short_loops);
}

/// bf16's AMX row-block cut in use: tuning::bf16_block_rows when it is a multiple of 16 up to
/// amx_block_rows (the tiles' buffers hold that many rows), else amx_block_rows.
inline index_t bf16_block_rows(const tuning& tune) noexcept {
  const index_t v = tune.bf16_block_rows;
  return v >= 16 && v <= amx_block_rows && v % 16 == 0 ? v : amx_block_rows;
}

}  // namespace detail

/// out[t] = sum_j w[t,j] · expert_{id[t,j]}(x[t]) for quant::bf16 (inputs rounded to bf16);
/// `tune` and `phases` as forward_standard's.
template <class Unused = void>
void forward_amx_bf16(const DispatchOutput<format::standard>& d, const Prepared<AmxBf16Experts>& p,
                      const ExpertMlp& mlp, MatrixRef out, const tuning& tune, PhaseTimes* phases) {
  const AmxBf16Experts& pk = p.packed;
  Workspace& ws = p.workspace;
  const ExpertShape& s = pk.shape;
  const index_t k = d.ids.cols(), H = s.hidden, I = s.intermediate, H32 = padded_k32(H), I32 = padded_k32(I);
  // Row strides of the bf16 GEMM inputs (elements): H32 and I32 rounded to an odd number of lines.
  const index_t ldh = amx_row_stride_bytes(2 * H32) / 2, ldi = amx_row_stride_bytes(2 * I32) / 2;
  const index_t min_rows = tune.tiles_from(amx_min_rows_bf16);
  const bool short_loops = tune.short_loops();
  constexpr index_t spare = 16;  // rows a 16-row tile may read past the last block

  // bf16 input rows in sorted order (weighted first when the routing weight scales the input).
  const auto inputs = [&](const ExpertRows& sr) {
    const index_t N = sr.rows();
    ws.a16.resize(static_cast<std::size_t>((N + spare) * ldh));
    kernels::parallel_for(tbb::blocked_range<index_t>(0, N, 16), [&](const tbb::blocked_range<index_t>& r) {
      for (index_t n = r.begin(); n != r.end(); ++n) {
        const index_t slot = sr.slot_of[static_cast<std::size_t>(n)];
        const float wt = mlp.weight_on_input ? ws.row_weight[static_cast<std::size_t>(n)] : 1.0f;
        to_bf16_row(d.hidden.row(slot / k).data(), wt, H, H32, ws.a16.data() + n * ldh);
      }
    });
  };

  const auto gemms = [&](const ExpertRows& sr, bool stream, auto&& run) {
    const index_t N = sr.rows();
    // GEMM 1 + activation, stored as the bf16 rows that GEMM 2 reads (the scheme rounds it to bf16);
    // columns [I, I32) of every row stay zero. Then GEMM 2, bias and routing weight: two phases, or
    // (kernel::tiled_amx) one pipeline, a row block's GEMM 2 as soon as its GEMM 1 is done
    // (detail::pipelined_tasks).
    ws.h16.resize(static_cast<std::size_t>((N + spare) * ldi));
    zero_k_padding(ws.h16.data(), N, ldi, I, I32);
    const bool by_block =
        detail::gemm1_by_block(detail::pipeline_on(pk.pipelined, tune), N, sr.blocks.size(), tune.gemm1_by_block);
    const auto gemm1 = [&](const Task& task, const Task* next, const detail::worker& w) {
      const RowBlock& b = sr.block(task);
      const std::uint16_t* a = ws.a16.data() + b.begin * ldh;
      if (by_block) {
        // Panel after panel, each panel's epilogue inside the next panel's tiles
        // (detail::gemm1_panels_interleaved).
        alignas(64) float c[2][amx_block_rows * panel_cols];
        detail::gemm1_panels_interleaved(
            pk.panels13, b.rows, c[0], c[1], w.task_ns,
            [&](index_t cb, float* cc, auto& side) {
              const std::uint16_t* after = cb + 1 < pk.panels13 ? pk.panel13(b.expert, cb + 1)
                                           : next               ? pk.panel13(sr.block(*next).expert, 0)
                                                                : nullptr;
              detail::amx_block_times_panel(pk.use_amx, short_loops, min_rows, b.rows, a, ldh, H,
                                            pk.panel13(b.expert, cb), after, cc, side);
            },
            [&](index_t cb, float* cc, index_t i) {
              detail::finish13_row<true>(mlp, pk, cb, pk.bias13(b.expert, cb), cc + i * panel_cols,
                                         ws.h16.data() + (b.begin + i) * ldi);
            });
        return;
      }
      alignas(64) float c[amx_block_rows * panel_cols];
      detail::amx_block_times_panel(pk.use_amx, short_loops, min_rows, b.rows, a, ldh, H,
                                    pk.panel13(b.expert, task.panel),
                                    next ? pk.panel13(sr.block(*next).expert, next->panel) : nullptr, c);
      const TaskClock epilogue(w.task_ns, PhaseTimes::gemm1_epilogue);
      detail::finish13<true>(mlp, pk, b, task.panel, c, ws.h16.data(), ldi);
    };
    const auto gemm2 = [&](const Task& task, const Task* next, const detail::worker& w) {
      alignas(64) float c[amx_block_rows * panel_cols];
      const RowBlock& b = sr.block(task);
      detail::amx_block_times_panel(pk.use_amx, short_loops, min_rows, b.rows, ws.h16.data() + b.begin * ldi, ldi, I,
                                    pk.panel2(b.expert, task.panel),
                                    next ? pk.panel2(sr.block(*next).expert, next->panel) : nullptr, c);
      detail::finish2(mlp, pk, b, task.panel, c, ws.row_weight.data(), ws.y.data(), stream, w.task_ns);
    };
    run(pk.pipelined, by_block ? 1 : pk.panels13, pk.panels2, gemm1, nullptr, gemm2);
  };
  forward_skeleton(d, s, pk.expert_bytes(), out, ws,
                   pk.use_amx ? BlockCut{detail::bf16_block_rows(tune), 16} : BlockCut{block_rows}, tune, phases,
                   inputs, gemms);
}

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_AMX_FORWARD
