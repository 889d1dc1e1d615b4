#pragma once
#include <cstdint>
#include <string_view>
#include <utility>

#include <polymoe/core/detail/dependent_false.hpp>
#include <polymoe/core/roles.hpp>
#include <polymoe/kernels/tiled/forward.hpp>
#include <polymoe/quant/bf16.hpp>
#include <polymoe/quant/fp32.hpp>

namespace polymoe::kernel {

namespace tiled_detail {

/// How the tiled kernel stores a scheme's weights and rounds its activations. The primary template
/// exists only to fail: the pairing table lists the schemes that have a specialisation.
template <class Q>
struct scheme {
  static_assert(polymoe::detail::dependent_false<Q>,
                "polymoe: kernel::tiled implements quant::fp32 and quant::bf16 only; use one of them or "
                "kernel::reference / kernel::tbb_grouped for this scheme");
};

template <>
struct scheme<quant::fp32> {
  using weight = float;
  static constexpr bool round_bf16 = false;  // quant::fp32::quantize_activation is the identity
  static kernels::tiled::PackedExperts<float> pack(const quant::fp32::weights& w) {
    const ExpertShape s = w.shape();
    return kernels::tiled::pack_experts<float>(
        s, [&](index_t e, index_t r, index_t c) { return w.w13(e * s.rows13() + r, c); },
        [&](index_t e, index_t r, index_t c) { return w.w2(e * s.hidden + r, c); },
        [&](index_t e) { return w.b13_of(e); }, [&](index_t e) { return w.b2_of(e); });
  }
};

template <>
struct scheme<quant::bf16> {
  using weight = std::uint16_t;
  static constexpr bool round_bf16 = true;  // quant::bf16::quantize_activation rounds to bf16
  static kernels::tiled::PackedExperts<std::uint16_t> pack(const quant::bf16::weights& w) {
    const ExpertShape s = w.shape();
    const index_t H = s.hidden, I = s.intermediate, R = s.rows13();
    return kernels::tiled::pack_experts<std::uint16_t>(
        s, [&](index_t e, index_t r, index_t c) { return w.w13[static_cast<std::size_t>((e * R + r) * H + c)]; },
        [&](index_t e, index_t r, index_t c) { return w.w2[static_cast<std::size_t>((e * H + r) * I + c)]; },
        [&](index_t e) { return w.b13_of(e); }, [&](index_t e) { return w.b2_of(e); });
  }
};

}  // namespace tiled_detail

/// The fast CPU expert kernel: (token, slot) pairs sorted by expert into row blocks, weights
/// prepacked once into 64-column panels (bf16 kept as bf16), register-tiled AVX-512 micro-kernels
/// (portable loops without AVX-512) with the activation fused into the first GEMM and the routing
/// weight into the second, a GEMV-like path for one or two rows per expert (decode), and one
/// oneTBB loop per GEMM over (row block x panel) of all experts at once. Bitwise independent of
/// the thread count; allocates nothing per forward after warm-up. Implements quant::fp32 and
/// quant::bf16 on the standard format.
///
///   polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::bf16, polymoe::kernel::tiled> layer(cfg, weights);
struct tiled {
  using kernel_concept = kernel_tag;
  static constexpr std::string_view name = "tiled";

  template <class Q>
  using prepared = kernels::tiled::Prepared<typename tiled_detail::scheme<Q>::weight>;

  template <class Q>
  static prepared<Q> prepare(typename Q::weights w) {
    return prepared<Q>{tiled_detail::scheme<Q>::pack(w), {}};
  }

  template <class Q>
  void run(const DispatchOutput<format::standard>& d, const prepared<Q>& p, const ExpertMlp& mlp,
           CombineInput<format::standard> c) const {
    kernels::tiled::forward_standard<tiled_detail::scheme<Q>::round_bf16>(d, p, mlp, c.out);
  }
};

}  // namespace polymoe::kernel
