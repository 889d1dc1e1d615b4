#pragma once
#include <string>
#include <string_view>

#include <polymoe/core/roles.hpp>
#include <polymoe/kernel/detail/tiled_levels.hpp>
#include <polymoe/kernel/tiled.hpp>
#include <polymoe/kernels/tiled/isa.hpp>

namespace polymoe::kernel {

/// kernel::tiled with AMX tile micro-kernels: quant::bf16 (tdpbf16ps; weights prepacked into the
/// tile layout), quant::int8_w8a8 (tdpbusd; weights prepacked into int8's tile layout), and
/// tdpbf16ps on weights kept in kernel::tiled's panels and decoded to bf16 as the tasks need them:
/// quant::mxfp4, nvfp4 and nvfp4_w4a4 a slab at a time (kernels/tiled/amx_e2m1.hpp; fp32
/// activations as two bf16 terms, W4A16's (mxfp4_w4a16, nvfp4_w4a16) as one, W4A4's as their
/// e2m1 · e4m3 values with the row's scale_2 after the tiles), quant::fp8, fp8_block and fp8_block_weight_only a scale group at a time, each
/// group's sum scaled after the tiles (kernels/tiled/amx_e4m3.hpp; W8A8 activations as E4M3
/// values, weight-only ones as two bf16 terms). Blocks of few rows per expert (decode) run
/// AVX-512. A build that targets AMX (-march=sapphirerapids, or POLYMOE_AMX=ON) runs the tiles
/// without any run-time test; other builds detect AMX when a layer is prepared and fall back to
/// AVX-512 without it (kernels/tiled/amx.hpp). Unlike kernel::tiled, the two GEMMs run as one
/// stream of tasks, a row block's GEMM 2 as soon as its GEMM 1 is done. Its tuning and phase
/// sink as kernel::tiled's (tuning.amx_min_rows = 1 puts every row block on the tiles).
///
///   polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::bf16, polymoe::kernel::tiled_amx> layer(cfg, weights);
struct tiled_amx {
  using kernel_concept = kernel_tag;
  static constexpr std::string_view name = "tiled_amx";
  static constexpr int speed = 3;  ///< rank among the kernels (--kernel auto), where the tiles run
  /// Whether this machine runs the tiles (without them the layout's AVX-512 loops run, no faster
  /// than kernel::tiled's).
  static bool fast_here() { return kernels::tiled::amx_runs_here(); }

  kernels::tiled::tuning tuning{};
  kernels::tiled::PhaseTimes* phases = nullptr;  ///< where forwards record their phase times (nullptr: nowhere)

  /// This kernel with tuning.batch_invariant set: every row by one path whatever its batch (the
  /// layer runs its shared expert with it).
  [[nodiscard]] tiled_amx batch_invariant() const {
    tiled_amx k = *this;
    k.tuning.batch_invariant = true;
    return k;
  }

  /// As kernel::tiled's: for the instruction-set level this CPU runs.
  template <class Q>
  using prepared = tiled_detail::prepared_on<tiled_detail::amx_levels, Q>;

  /// As kernel::tiled's prepare; whether the tiles run is decided here (amx_enabled).
  template <class Q>
  prepared<Q> prepare(typename Q::weights w) const {
    kernels::tiled::validate(tuning);
    return tiled_detail::prepare_on<tiled_detail::amx_levels, Q>(tuning, w);
  }

  template <class Q>
  void run(const DispatchOutput<format::standard>& d, const prepared<Q>& p, const ExpertMlp& mlp,
           CombineInput<format::standard> c) const {
    tiled_detail::run_on<tiled_detail::amx_levels, Q>(tuning, phases, p, d, mlp, c);
  }

  /// As kernel::tiled's, and whether the AMX tiles run.
  [[nodiscard]] std::string path() const {
    return tiled{tuning}.path() + (kernels::tiled::amx_runs_here(tuning.isa) ? ", AMX tiles" : ", no AMX tiles");
  }
};

}  // namespace polymoe::kernel
