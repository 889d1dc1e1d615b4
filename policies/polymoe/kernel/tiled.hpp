#pragma once
#include <string>
#include <string_view>

#include <polymoe/core/roles.hpp>
#include <polymoe/kernel/detail/tiled_levels.hpp>
#include <polymoe/kernels/tiled/isa.hpp>
#include <polymoe/kernels/tiled/phases.hpp>
#include <polymoe/kernels/tiled/tuning.hpp>

namespace polymoe::kernel {

/// The fast CPU expert kernel: (token, slot) pairs sorted by expert into row blocks, weights
/// prepacked once into 64-column panels (bf16 kept as bf16), register-tiled AVX-512 micro-kernels
/// (portable loops without AVX-512; a build that does not pin the instruction set compiles every
/// level and prepares for the best this CPU runs: kernels/tiled/level.hpp) with the activation fused into the first GEMM and the routing
/// weight into the second, a GEMV-like path for one or two rows per expert (decode), and one
/// oneTBB loop per GEMM over (row block x panel) of all experts at once. Bitwise independent of
/// the thread count; allocates nothing per forward after warm-up. Implements, on the standard
/// format: fp32 and bf16 (bf16 widened in registers, or vdpbf16ps on bf16 pairs where the target
/// runs it at the FMA's rate: POLYMOE_TILED_DPBF16); fp8, fp8_block(_weight_only), mxfp4 and
/// nvfp4 with their codes kept in the panels and widened in registers or per L1 slab
/// (kernels/tiled/qpanel.hpp); nvfp4_w4a4 as nvfp4, its GEMM inputs quantized per row first;
/// mxfp4_w4a16 and nvfp4_w4a16 as mxfp4 and nvfp4, their GEMM inputs rounded to bf16;
/// int8_w8a8 with integer VNNI GEMMs (kernels/tiled/int8.hpp).
///
/// It carries its tuning (kernels/tiled/tuning.hpp; default-constructed: the measured defaults)
/// and, for benchmarks, a sink for its forwards' phase times (kernels/tiled/phases.hpp):
///
///   polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::bf16, polymoe::kernel::tiled> layer(cfg, weights);
///   polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::bf16, polymoe::kernel::tiled> tuned(
///       cfg, weights, {}, polymoe::kernel::tiled{polymoe::kernels::tiled::parse_tuning("sum-span=128")});
struct tiled {
  using kernel_concept = kernel_tag;
  static constexpr std::string_view name = "tiled";
  static constexpr int speed = 2;  ///< rank among the kernels (--kernel auto)

  kernels::tiled::tuning tuning{};
  kernels::tiled::PhaseTimes* phases = nullptr;  ///< where forwards record their phase times (nullptr: nowhere)

  /// This kernel with tuning.batch_invariant set: every row by one path whatever its batch (the
  /// layer runs its shared expert with it).
  [[nodiscard]] tiled batch_invariant() const {
    tiled k = *this;
    k.tuning.batch_invariant = true;
    return k;
  }

  /// The weights packed for the instruction-set level this CPU runs (kernels/tiled/level.hpp), and
  /// a workspace.
  template <class Q>
  using prepared = tiled_detail::prepared_on<tiled_detail::levels, Q>;

  /// The weights packed, and a workspace; buffers allocated as tuning.huge_pages says. Throws
  /// polymoe::error on a tuning out of range (kernels::tiled::validate).
  template <class Q>
  prepared<Q> prepare(typename Q::weights w) const {
    kernels::tiled::validate(tuning);
    return tiled_detail::prepare_on<tiled_detail::levels, Q>(tuning, w);
  }

  template <class Q>
  void run(const DispatchOutput<format::standard>& d, const prepared<Q>& p, const ExpertMlp& mlp,
           CombineInput<format::standard> c) const {
    tiled_detail::run_on<tiled_detail::levels, Q>(tuning, phases, p, d, mlp, c);
  }

  /// The instruction set a layer prepared now runs (tuning.isa's level, or the best here), in words.
  [[nodiscard]] std::string path() const {
    return std::string(kernels::tiled::level_words(kernels::tiled::level_for(tuning.isa))) +
           (kernels::tiled::run_time_isa ? ", chosen at run time" : "");
  }
};

}  // namespace polymoe::kernel
