#pragma once
#include <cstdint>
#include <string_view>
#include <type_traits>

#include <polymoe/core/detail/dependent_false.hpp>
#include <polymoe/core/roles.hpp>
#include <polymoe/kernel/tiled.hpp>
#include <polymoe/kernels/tiled/amx_e2m1.hpp>
#include <polymoe/kernels/tiled/amx_forward.hpp>

namespace polymoe::kernel {

namespace tiled_amx_detail {

/// The schemes kernel::tiled_amx runs (the pairing table lists the same two).
template <class Q>
struct scheme {
  static_assert(polymoe::detail::dependent_false<Q>,
                "polymoe: kernel::tiled_amx implements quant::bf16, quant::int8_w8a8 and quant::mxfp4 only "
                "(AMX has bf16 and int8 tiles); use kernel::tiled for other schemes");
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

}  // namespace tiled_amx_detail

/// kernel::tiled with AMX tile micro-kernels: quant::bf16 (tdpbf16ps; weights prepacked into the
/// tile layout), quant::int8_w8a8 (tdpbusd; weights prepacked into int8's tile layout) and
/// quant::mxfp4 (tdpbf16ps on weights decoded from kernel::tiled's MXFP4 panels a slab at a time,
/// the fp32 activations as two bf16 terms; kernels/tiled/amx_e2m1.hpp). Blocks of few rows per expert
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
    else if constexpr (std::is_same_v<Q, quant::mxfp4>)
      kernels::tiled::forward_amx_mxfp4(d, p, mlp, c.out);
    else
      kernels::tiled::forward_amx_bf16(d, p, mlp, c.out);
  }
};

}  // namespace polymoe::kernel
