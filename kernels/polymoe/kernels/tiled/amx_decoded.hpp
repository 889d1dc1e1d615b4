// kernel::tiled_amx's forward pass for weights kept in their codes and decoded onto the bf16 tiles
// as the tasks need them: MXFP4 and NVFP4 (amx_e2m1.hpp; NVFP4 weight-only or W4A4) and E4M3
// (amx_e4m3.hpp; W8A8 or weight-only).
// forward_standard's steps (sort, GEMM 1 + activation, GEMM 2 + routing weight, slot-order sum;
// forward.hpp), with the GEMM inputs as tile rows in sorted order for the blocks on the tiles
// (split rows, bf16 rows for W4A16, or E4M3 values with their group scales) and fp32 rows for the
// others, which run kernel::tiled's path for the format (qpanel.hpp). The GEMMs run as one
// pipeline of (row block, panel) tasks (detail::pipelined_tasks); for W8A8 and W4A4 a block's
// GEMM 2 inputs are quantized when its GEMM 1 is done (the amax of a group of 128 activations, or
// of a row, spans several GEMM 1 panels).
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_AMX_DECODED) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_AMX_DECODED
#undef POLYMOE_TILED_GUARD_AMX_DECODED
#else
#define POLYMOE_TILED_GUARD_AMX_DECODED
#endif
#include <algorithm>
#include <cstdint>
#include <span>
#include <type_traits>

#include <polymoe/kernels/tiled/amx_e2m1.hpp>
#include <polymoe/kernels/tiled/act_quant.hpp>
#include <polymoe/kernels/tiled/amx_e4m3.hpp>
#include <polymoe/kernels/tiled/forward.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

/// out[t] = sum_j w[t,j] · expert_{id[t,j]}(x[t]) for weights of format F (mxfp4_format,
/// nvfp4_format or fp8_format) decoded onto the bf16 tiles: Act is the scheme's input treatment
/// (e4m3_inputs for fp8 W8A8, nvfp4_w4a4_inputs for NVFP4 W4A4, bf16_inputs for W4A16,
/// keep_inputs for weight-only schemes with fp32 activations), ActGroup the W8A8 activation group
/// (128; 0: one group per row). Blocks of the format's threshold rows or more on the tiles when the
/// layer was prepared with them (tuning::amx_min_rows overrides the threshold), the others on
/// kernel::tiled's path for F; the GEMMs as one pipeline either way. `tune` and `phases` as
/// forward_standard's.
template <class F, class Act, index_t ActGroup>
void forward_amx_decoded(const DispatchOutput<format::standard>& d, const Prepared<QPackedExperts<F>>& p,
                         const ExpertMlp& mlp, MatrixRef out, const tuning& tune, PhaseTimes* phases) {
  constexpr bool e2m1 = F::code == qcode::e2m1;
  constexpr bool qact = Act::per_row;  // quantized activations: E4M3 (W8A8) or NVFP4 (W4A4) values on the tiles
  static_assert(!qact || std::is_same_v<F, fp8_format> || std::is_same_v<F, nvfp4_format>,
                "activations quantized on the tiles: fp8 W8A8 and NVFP4 W4A4 only");
  constexpr bool a16 = Act::round_bf16;  // W4A16: the rows rounded to bf16, one term on the tiles
  static_assert(!a16 || e2m1, "bf16 activations on the tiles: the E2M1 formats (W4A16) only");
  constexpr bool one_bf16 = qact || a16;  // tile rows of one bf16 term (else split rows, hi + lo)
  const QPackedExperts<F>& pk = p.packed;
  Workspace& ws = p.workspace;
  const ExpertShape& s = pk.shape;
  const index_t k = d.ids.cols(), H = s.hidden, I = s.intermediate;
  [[maybe_unused]] const index_t H32 = padded_k32(H), I32 = padded_k32(I);
  // activation scales per row: W8A8's per group of 128 (F::groups), W4A4's scale_2
  [[maybe_unused]] const index_t gH = e2m1 ? 1 : F::groups(H), gI = e2m1 ? 1 : F::groups(I);
  // Row strides of the tile inputs (elements): quantized values (W8A8, W4A4), bf16 rows (W4A16) or
  // split rows (weight-only), rounded to an odd number of lines.
  constexpr index_t bytes_per_k = one_bf16 ? 2 : 4;
  [[maybe_unused]] const index_t ldh = amx_row_stride_bytes(bytes_per_k * H32) / 2;
  [[maybe_unused]] const index_t ldi = amx_row_stride_bytes(bytes_per_k * I32) / 2;
  constexpr index_t nvfp4_rows = qact  ? amx_min_rows_nvfp4_w4a4
                                 : a16 ? amx_min_rows_nvfp4_w4a16
                                       : amx_min_rows_nvfp4;
  constexpr index_t mxfp4_rows = a16 ? amx_min_rows_e2m1_w4a16 : amx_min_rows_e2m1;
  constexpr index_t e4m3_rows = qact ? amx_min_rows_e4m3_w8a8 : amx_min_rows_e4m3;
  constexpr index_t default_min_rows = std::is_same_v<F, nvfp4_format> ? nvfp4_rows
                                       : e2m1                           ? mxfp4_rows
                                                                        : e4m3_rows;
  const index_t min_rows = tune.tiles_from(default_min_rows);
  const bool row_group = tune.row_group;
#if POLYMOE_TILED_AMX_CODE
  const bool amx = pk.use_amx;
  using Ops = std::conditional_t<one_bf16, amx::bf16_ops, amx::bf16x2_ops>;
  // rows [0, m) of A (tile rows from `a`, lda apart; activation scales sa, lds apart) times a panel;
  // `one_term`: split rows whose lo terms are all zero, run with their hi terms alone
  const auto times_panel = [row_group](index_t m, const std::uint16_t* a, index_t lda, const float* sa, index_t lds,
                                       index_t K, const QPanel<F>& panel, float* c, bool one_term = false) {
    const auto run = [&]<class O>() {
      if constexpr (e2m1)
        detail::e2m1_block_times_panel<F, O>(m, a, lda, sa, K, panel, c, row_group);
      else
        detail::fp8_times_panel<O>(m, a, lda, sa, lds, K, panel, c, row_group);
    };
    if constexpr (!one_bf16)
      if (one_term) return run.template operator()<amx::bf16x2_hi_ops>();
    run.template operator()<Ops>();
  };
  // a row of src[0..n) · wt for the tiles (W8A8, W4A4): its values at dst, its scales at sa
  [[maybe_unused]] const auto quantize_row = [](const float* src, float wt, index_t n, index_t n32,
                                                std::uint16_t* dst, float* sa) {
    if constexpr (e2m1)
      *sa = quantize_nvfp4_tile_row(src, wt, n, n32, dst);
    else
      quantize_e4m3_row(src, wt, n, n32, ActGroup > 0 ? ActGroup : n, dst, sa);
  };
#else
  constexpr bool amx = false;
  (void)row_group;
#endif
  constexpr index_t spare = 16;  // rows a 16-row tile may read past the last block
  const auto tiles = [&](const RowBlock& b) { return amx && b.rows >= min_rows; };
  const auto at = [](index_t i) { return static_cast<std::size_t>(i); };
  bool some_tiles = false, some_fma = false;  // blocks on the tiles, blocks on the FMA path

  const auto inputs = [&](const ExpertRows& sr) {
    const index_t N = sr.rows();
    some_tiles = std::any_of(sr.blocks.begin(), sr.blocks.end(), tiles);
    some_fma = !std::all_of(sr.blocks.begin(), sr.blocks.end(), tiles);

    // Inputs in sorted order: tile rows (and scales) for the blocks on tiles; for the others fp32
    // rows, the caller's or copies (weighted, and quantized as the scheme does). Quantized tile rows
    // without a routing weight on the input are quantized once per token and copied to each of the
    // token's sorted rows (the quantizer costs several times the copy;
    // docs/decisions.md#quantize-once-per-token).
    if (some_tiles) {
      ws.a16.resize(at((N + spare) * ldh));
      if (qact) ws.a_scales.resize(at(N * gH));
    }
    [[maybe_unused]] const bool per_token = qact && some_tiles && !mlp.weight_on_input;
#if POLYMOE_TILED_AMX_CODE
    if (per_token) {
      const index_t T = d.hidden.rows();
      ws.t16.resize(at(T * ldh));
      ws.t_scales.resize(at(T * gH));
      kernels::parallel_for(tbb::blocked_range<index_t>(0, T, 4), [&](const tbb::blocked_range<index_t>& r) {
        for (index_t t = r.begin(); t != r.end(); ++t)
          quantize_row(d.hidden.row(t).data(), 1.0f, H, H32, ws.t16.data() + t * ldh, ws.t_scales.data() + t * gH);
      });
    }
#endif
    ws.a_rows.resize(at(N));
    if (some_fma && (one_bf16 || mlp.weight_on_input)) ws.x.resize(at(N * H));
    // Weight-only blocks on the tiles whose split rows have only zero lo terms (inputs that are bf16
    // values, as an engine's bf16 hidden states are) run GEMM 1 with the hi terms alone: the same
    // bits, half the tile work (amx::bf16x2_hi_ops).
    const bool one_term_allowed = !one_bf16 && tune.one_term;
    ws.one_term.assign(sr.blocks.size(), std::uint8_t{0});
    kernels::parallel_for(tbb::blocked_range<std::size_t>(0, sr.blocks.size()),
                          [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t bi = r.begin(); bi != r.end(); ++bi) {
        const RowBlock& b = sr.blocks[bi];
        bool lo_zero = true;
        for (index_t n = b.begin; n < b.begin + b.rows; ++n) {
          const float* src = d.hidden.row(sr.slot_of[at(n)] / k).data();
          const float wt = mlp.weight_on_input ? ws.row_weight[at(n)] : 1.0f;
#if POLYMOE_TILED_AMX_CODE
          if (tiles(b)) {
            if constexpr (qact) {
              if (per_token) {
                const index_t t = sr.slot_of[at(n)] / k;
                std::copy_n(ws.t16.data() + t * ldh, H32, ws.a16.data() + n * ldh);
                std::copy_n(ws.t_scales.data() + t * gH, gH, ws.a_scales.data() + n * gH);
              } else {
                quantize_row(src, wt, H, H32, ws.a16.data() + n * ldh, ws.a_scales.data() + n * gH);
              }
            } else if constexpr (a16) {
              to_bf16_row(src, wt, H, H32, ws.a16.data() + n * ldh);
            } else {
              lo_zero &= split_bf16_row(src, wt, H, H32, ws.a16.data() + n * ldh);
            }
            continue;
          }
#endif
          if (one_bf16 || mlp.weight_on_input) {
            float* dst = ws.x.data() + n * H;
            for (index_t c = 0; c < H; ++c) dst[c] = src[c] * wt;
            if constexpr (a16) round_bf16(dst, H);
            Act::row(std::span<float>(dst, at(H)));
            src = dst;
          }
          ws.a_rows[at(n)] = src;
        }
        ws.one_term[bi] = one_term_allowed && tiles(b) && lo_zero;
      }
    });
  };

  const auto gemms = [&](const ExpertRows& sr, bool stream, auto&& run) {
    const index_t N = sr.rows();

    // GEMM 1 + activation: fp32 rows (W8A8 and W4A4, quantized per block when its GEMM 1 is done; FMA
    // blocks, rounded to bf16 for W4A16), or tile rows straight from the epilogue (weight-only blocks
    // on tiles: split rows, or W4A16's bf16 rows; columns [I, I32) zero). Then GEMM 2, bias and
    // routing weight, as one pipeline.
    if (some_tiles) {
      ws.h16.resize(at((N + spare) * ldi));
      if (qact) ws.hs.resize(at(N * gI));
      if constexpr (a16) zero_k_padding(ws.h16.data(), N, ldi, I, I32);
    }
    if (qact || some_fma) ws.act.resize(at(N * I));
    const auto gemm1 = [&](const Task& task, const Task*, const detail::worker& w) {
      alignas(64) float c[amx_block_rows * panel_cols];
      const RowBlock& b = sr.block(task);
      const index_t cb = task.panel;
#if POLYMOE_TILED_AMX_CODE
      if (tiles(b)) {
        times_panel(b.rows, ws.a16.data() + b.begin * ldh, ldh, qact ? ws.a_scales.data() + b.begin * gH : nullptr,
                    gH, H, pk.panel13(b.expert, cb), c, ws.one_term[at(task.block)] != 0);
        const TaskClock epilogue(w.task_ns, PhaseTimes::gemm1_epilogue);
        if constexpr (qact)
          detail::finish13<false>(mlp, pk, b, cb, c, ws.act.data(), I);
        else if constexpr (a16)
          detail::finish13<true>(mlp, pk, b, cb, c, ws.h16.data(), ldi);
        else
          detail::split_finish13(mlp, pk, b, cb, c, ws.h16.data(), ldi);
        return;
      }
#endif
      detail::block_times_panel<a16>(b.rows, [&](index_t i) { return ws.a_rows[at(b.begin + i)]; }, H,
                                     pk.panel13(b.expert, cb), c, tune.short_loops());
      const TaskClock epilogue(w.task_ns, PhaseTimes::gemm1_epilogue);
      detail::finish13<a16>(mlp, pk, b, cb, c, ws.act.data(), I);
    };
    // W8A8, W4A4: a block's activations quantized once its GEMM 1 is done (tile rows and scales, or in
    // place as the scheme does).
    const auto quantize_block = [&](index_t bi) {
      const RowBlock& b = sr.blocks[at(bi)];
      for (index_t n = b.begin; n < b.begin + b.rows; ++n) {
        float* row = ws.act.data() + n * I;
#if POLYMOE_TILED_AMX_CODE
        if (tiles(b)) {
          quantize_row(row, 1.0f, I, I32, ws.h16.data() + n * ldi, ws.hs.data() + n * gI);
          continue;
        }
#endif
        Act::row(std::span<float>(row, at(I)));
      }
    };
    const auto gemm2 = [&](const Task& task, const Task*, const detail::worker& w) {
      alignas(64) float c[amx_block_rows * panel_cols];
      const RowBlock& b = sr.block(task);
#if POLYMOE_TILED_AMX_CODE
      if (tiles(b))
        times_panel(b.rows, ws.h16.data() + b.begin * ldi, ldi, qact ? ws.hs.data() + b.begin * gI : nullptr, gI, I,
                    pk.panel2(b.expert, task.panel), c);
      else
#endif
        detail::block_times_panel<a16>(b.rows, [&](index_t i) { return ws.act.data() + (b.begin + i) * I; }, I,
                                       pk.panel2(b.expert, task.panel), c, tune.short_loops());
      detail::finish2(mlp, pk, b, task.panel, c, ws.row_weight.data(), ws.y.data(), stream, w.task_ns);
    };
    if constexpr (qact)
      run(pk.pipelined, pk.panels13, pk.panels2, gemm1, quantize_block, gemm2);
    else
      run(pk.pipelined, pk.panels13, pk.panels2, gemm1, nullptr, gemm2);
  };
  forward_skeleton(d, s, pk.expert_bytes(), out, ws, amx ? BlockCut{amx_block_rows, 16} : BlockCut{block_rows}, tune,
                   phases, inputs, gemms);
}

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_AMX_DECODED
