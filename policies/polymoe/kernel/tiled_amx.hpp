#pragma once
#include <cstdint>
#include <string_view>
#include <type_traits>

#include <polymoe/core/detail/dependent_false.hpp>
#include <polymoe/core/roles.hpp>
#include <polymoe/kernel/tiled.hpp>
#include <polymoe/kernels/tiled/amx_decoded.hpp>
#include <polymoe/kernels/tiled/amx_forward.hpp>

namespace polymoe::kernel {

namespace tiled_amx_detail {

/// The schemes kernel::tiled_amx runs (the pairing table lists the same ones); pack(w, huge_pages)
/// as kernel::tiled's.
template <class Q>
struct scheme {
  static_assert(polymoe::detail::dependent_false<Q>,
                "polymoe: kernel::tiled_amx has no specialisation for this quant scheme (AMX has bf16 and int8 "
                "tiles); a scheme_row that names kernel::tiled_amx in on<...> needs one. Through MoeLayer, the "
                "pairing table's diagnostic lists the schemes it implements");
};

template <>
struct scheme<quant::bf16> {
  using packed = kernels::tiled::AmxBf16Experts;
  static packed pack(const quant::bf16::weights& w, bool huge_pages) {
    packed p = tiled_detail::scheme<quant::bf16>::pack_in<kernels::tiled::amx_layout>(w, huge_pages);
    p.use_amx = kernels::tiled::amx_enabled();
    p.pipelined = true;
    return p;
  }
};

template <>
struct scheme<quant::int8_w8a8> {
  using packed = kernels::tiled::Int8PackedExperts;
  static packed pack(const quant::int8_w8a8::weights& w, bool huge_pages) {
    packed p = tiled_detail::scheme<quant::int8_w8a8>::pack(w, huge_pages, kernels::tiled::amx_enabled());
    p.pipelined = true;
    return p;
  }
};

/// Whether the tiles can decode a scheme's weights exactly into bf16: MXFP4 needs normal values
/// (mxfp4_exact_in_bf16), NVFP4 unsigned block scales (nvfp4_scales_unsigned); every E4M3 value is
/// a bf16 number.
[[nodiscard]] inline bool tiles_decode(const quant::mxfp4::weights& w) {
  return kernels::tiled::mxfp4_exact_in_bf16(w.w13_blocks, w.w13_scales) &&
         kernels::tiled::mxfp4_exact_in_bf16(w.w2_blocks, w.w2_scales);
}
[[nodiscard]] inline bool tiles_decode(const quant::nvfp4::weights& w) {
  return kernels::tiled::nvfp4_scales_unsigned(w.w13_scale) && kernels::tiled::nvfp4_scales_unsigned(w.w2_scale);
}
template <class W>
[[nodiscard]] bool tiles_decode(const W&) {
  return true;
}

/// Weights kept in their codes: kernel::tiled's panels and input treatment, decoded onto the bf16
/// tiles (kernels/tiled/amx_decoded.hpp) on a machine with AMX when tiles_decode holds, else
/// kernel::tiled's path. `group`: the W8A8 activation scale group (0: one per row).
template <class Q, index_t Group = 0>
struct decoded_scheme {
  using packed = typename tiled_detail::scheme<Q>::packed;
  using inputs = typename tiled_detail::scheme<Q>::inputs;
  static constexpr index_t group = Group;
  static packed pack(const typename Q::weights& w, bool huge_pages) {
    packed p = tiled_detail::scheme<Q>::pack(w, huge_pages);
    p.use_amx = kernels::tiled::amx_enabled() && tiles_decode(w);
    p.pipelined = true;
    return p;
  }
};

template <>
struct scheme<quant::mxfp4> : decoded_scheme<quant::mxfp4> {};
template <>
struct scheme<quant::nvfp4> : decoded_scheme<quant::nvfp4> {};
template <>
struct scheme<quant::nvfp4_w4a4> : decoded_scheme<quant::nvfp4_w4a4> {};  // per-row scale_2
template <>
struct scheme<quant::mxfp4_w4a16> : decoded_scheme<quant::mxfp4_w4a16> {};  // bf16 rows, one term
template <>
struct scheme<quant::nvfp4_w4a16> : decoded_scheme<quant::nvfp4_w4a16> {};
template <>
struct scheme<quant::fp8> : decoded_scheme<quant::fp8> {};  // per-token activations
template <>
struct scheme<quant::fp8_block> : decoded_scheme<quant::fp8_block, quant::fp8_block::block> {};
template <>
struct scheme<quant::fp8_block_weight_only> : decoded_scheme<quant::fp8_block_weight_only, quant::fp8_block::block> {};

}  // namespace tiled_amx_detail

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
  static bool fast_here() { return kernels::tiled::amx_unavailable_reason() == nullptr; }

  kernels::tiled::tuning tuning{};
  kernels::tiled::PhaseTimes* phases = nullptr;  ///< where forwards record their phase times (nullptr: nowhere)

  /// This kernel with tuning.batch_invariant set: every row by one path whatever its batch (the
  /// layer runs its shared expert with it).
  [[nodiscard]] tiled_amx batch_invariant() const {
    tiled_amx k = *this;
    k.tuning.batch_invariant = true;
    return k;
  }

  template <class Q>
  using prepared = kernels::tiled::Prepared<typename tiled_amx_detail::scheme<Q>::packed>;

  /// As kernel::tiled's prepare; whether the tiles run is decided here (amx_enabled).
  template <class Q>
  prepared<Q> prepare(typename Q::weights w) const {
    kernels::tiled::validate(tuning);
    return prepared<Q>{tiled_amx_detail::scheme<Q>::pack(w, tuning.huge_pages),
                       kernels::tiled::Workspace(tuning.huge_pages)};
  }

  template <class Q>
  void run(const DispatchOutput<format::standard>& d, const prepared<Q>& p, const ExpertMlp& mlp,
           CombineInput<format::standard> c) const {
    using scheme = tiled_amx_detail::scheme<Q>;
    if constexpr (std::is_same_v<Q, quant::int8_w8a8>)
      kernels::tiled::forward_int8(d, p, mlp, c.out, tuning, phases);
    else if constexpr (std::is_same_v<Q, quant::bf16>)
      kernels::tiled::forward_amx_bf16(d, p, mlp, c.out, tuning, phases);
    else
      kernels::tiled::forward_amx_decoded<typename decltype(p.packed)::format, typename scheme::inputs, scheme::group>(
          d, p, mlp, c.out, tuning, phases);
  }
};

}  // namespace polymoe::kernel
