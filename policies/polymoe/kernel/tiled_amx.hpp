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

/// The schemes kernel::tiled_amx runs (the pairing table lists the same ones).
template <class Q>
struct scheme {
  static_assert(polymoe::detail::dependent_false<Q>,
                "polymoe: kernel::tiled_amx implements quant::bf16, quant::int8_w8a8, quant::fp8, quant::fp8_block, "
                "quant::fp8_block_weight_only, quant::mxfp4 and quant::nvfp4 only (AMX has bf16 and int8 tiles); use "
                "kernel::tiled or kernel::reference for other schemes");
};

template <>
struct scheme<quant::bf16> {
  using packed = kernels::tiled::AmxBf16Experts;
  static packed pack(const quant::bf16::weights& w) {
    packed p = tiled_detail::scheme<quant::bf16>::pack_in<kernels::tiled::amx_layout>(w);
    p.use_amx = kernels::tiled::amx_enabled();
    p.pipelined = true;
    return p;
  }
};

template <>
struct scheme<quant::int8_w8a8> {
  using packed = kernels::tiled::Int8PackedExperts;
  static packed pack(const quant::int8_w8a8::weights& w) {
    packed p = tiled_detail::scheme<quant::int8_w8a8>::pack(w, kernels::tiled::amx_enabled());
    p.pipelined = true;
    return p;
  }
};

template <>
struct scheme<quant::mxfp4> {
  using packed = kernels::tiled::QPackedExperts<kernels::tiled::mxfp4_format>;
  static packed pack(const quant::mxfp4::weights& w) {
    packed p = tiled_detail::scheme<quant::mxfp4>::pack(w);
    p.use_amx = kernels::tiled::amx_enabled() && kernels::tiled::mxfp4_exact_in_bf16(w.w13_blocks, w.w13_scales) &&
                kernels::tiled::mxfp4_exact_in_bf16(w.w2_blocks, w.w2_scales);
    p.pipelined = true;
    return p;
  }
};

template <>
struct scheme<quant::nvfp4> {
  using packed = kernels::tiled::QPackedExperts<kernels::tiled::nvfp4_format>;
  static packed pack(const quant::nvfp4::weights& w) {
    packed p = tiled_detail::scheme<quant::nvfp4>::pack(w);
    p.use_amx = kernels::tiled::amx_enabled() && kernels::tiled::nvfp4_scales_unsigned(w.w13_scale) &&
                kernels::tiled::nvfp4_scales_unsigned(w.w2_scale);
    p.pipelined = true;
    return p;
  }
};

/// E4M3 weights: kernel::tiled's fp8 panels, decoded onto the bf16 tiles group by group (every
/// E4M3 value is a bf16 number; kernels/tiled/amx_e4m3.hpp). `group`: the activation scale group
/// (0: one per row).
template <class Q, index_t Group>
struct e4m3_scheme {
  using packed = kernels::tiled::QPackedExperts<kernels::tiled::fp8_format>;
  using inputs = typename tiled_detail::scheme<Q>::inputs;
  static constexpr index_t group = Group;
  static packed pack(const typename Q::weights& w) {
    packed p = tiled_detail::scheme<Q>::pack(w);
    p.use_amx = kernels::tiled::amx_enabled();
    p.pipelined = true;
    return p;
  }
};

template <>
struct scheme<quant::fp8> : e4m3_scheme<quant::fp8, 0> {};  // per-token activations
template <>
struct scheme<quant::fp8_block> : e4m3_scheme<quant::fp8_block, quant::fp8_block::block> {};
template <>
struct scheme<quant::fp8_block_weight_only> : e4m3_scheme<quant::fp8_block_weight_only, quant::fp8_block::block> {};

template <class Q>
inline constexpr bool is_e4m3 = std::is_same_v<typename scheme<Q>::packed,
                                               kernels::tiled::QPackedExperts<kernels::tiled::fp8_format>>;

}  // namespace tiled_amx_detail

/// kernel::tiled with AMX tile micro-kernels: quant::bf16 (tdpbf16ps; weights prepacked into the
/// tile layout), quant::int8_w8a8 (tdpbusd; weights prepacked into int8's tile layout),
/// quant::mxfp4 and quant::nvfp4 (tdpbf16ps on weights decoded from kernel::tiled's MXFP4 and NVFP4
/// panels a slab at a time, the fp32 activations as two bf16 terms; kernels/tiled/amx_e2m1.hpp) and quant::fp8, fp8_block
/// and fp8_block_weight_only (tdpbf16ps on E4M3 values decoded from kernel::tiled's fp8 panels a
/// scale group at a time, each group's sum scaled after the tiles; W8A8 activations as E4M3
/// values, weight-only ones as two bf16 terms; kernels/tiled/amx_e4m3.hpp). Blocks of few rows per expert
/// (decode) run AVX-512. A build that targets AMX (-march=sapphirerapids, or POLYMOE_AMX=ON)
/// runs the tiles without any run-time test; other builds detect AMX when a layer is prepared and
/// fall back to AVX-512 without it (kernels/tiled/amx.hpp). Unlike kernel::tiled, the two GEMMs
/// run as one stream of tasks, a row block's GEMM 2 as soon as its GEMM 1 is done.
///
///   polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::bf16, polymoe::kernel::tiled_amx> layer(cfg, weights);
struct tiled_amx {
  using kernel_concept = kernel_tag;
  static constexpr std::string_view name = "tiled_amx";

  template <class Q>
  using prepared = kernels::tiled::Prepared<typename tiled_amx_detail::scheme<Q>::packed>;

  template <class Q>
  static prepared<Q> prepare(typename Q::weights w) {
    return prepared<Q>{tiled_amx_detail::scheme<Q>::pack(w), {}};
  }

  template <class Q>
  void run(const DispatchOutput<format::standard>& d, const prepared<Q>& p, const ExpertMlp& mlp,
           CombineInput<format::standard> c) const {
    if constexpr (std::is_same_v<Q, quant::int8_w8a8>)
      kernels::tiled::forward_int8(d, p, mlp, c.out);
    else if constexpr (std::is_same_v<Q, quant::mxfp4> || std::is_same_v<Q, quant::nvfp4>)
      kernels::tiled::forward_amx_decoded<typename decltype(p.packed)::format, kernels::tiled::keep_inputs, 0>(
          d, p, mlp, c.out);
    else if constexpr (tiled_amx_detail::is_e4m3<Q>)
      kernels::tiled::forward_amx_decoded<kernels::tiled::fp8_format, typename tiled_amx_detail::scheme<Q>::inputs,
                                          tiled_amx_detail::scheme<Q>::group>(d, p, mlp, c.out);
    else
      kernels::tiled::forward_amx_bf16(d, p, mlp, c.out);
  }
};

}  // namespace polymoe::kernel
