// kernel::tiled_amx's schemes and forward at one instruction-set level (as tiled_schemes.hpp for
// kernel::tiled): compiled once per level, reached through tiled_levels.hpp.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_TILED_AMX_SCHEMES) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_TILED_AMX_SCHEMES
#undef POLYMOE_TILED_GUARD_TILED_AMX_SCHEMES
#else
#define POLYMOE_TILED_GUARD_TILED_AMX_SCHEMES
#endif
#include <cstdint>
#include <type_traits>

#include <polymoe/core/detail/dependent_false.hpp>
#include <polymoe/kernel/detail/tiled_schemes.hpp>
#include <polymoe/kernels/tiled/amx_decoded.hpp>
#include <polymoe/kernels/tiled/amx_forward.hpp>

namespace polymoe::kernel::tiled_amx_detail {
POLYMOE_TILED_LEVEL_BEGIN

namespace kt = kernels::tiled::POLYMOE_TILED_LEVEL;
namespace td = tiled_detail::POLYMOE_TILED_LEVEL;


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
  using packed = kt::AmxBf16Experts;
  static packed pack(const quant::bf16::weights& w, bool huge_pages) {
    packed p = td::scheme<quant::bf16>::pack_in<kt::amx_layout>(w, huge_pages);
    p.use_amx = kt::amx_enabled();
    p.pipelined = true;
    return p;
  }
};

/// The integer schemes: kernel::tiled's packing in the tile layout where AMX runs, pipelined.
template <class Q>
struct integer_scheme {
  using packed = typename td::scheme<Q>::packed;
  static packed pack(const typename Q::weights& w, bool huge_pages) {
    packed p = td::scheme<Q>::pack(w, huge_pages, kt::amx_enabled());
    p.pipelined = true;
    return p;
  }
};

template <>
struct scheme<quant::int8_w8a8> : integer_scheme<quant::int8_w8a8> {};
template <>
struct scheme<quant::int4_w4a8> : integer_scheme<quant::int4_w4a8> {};  // int8's tiles, a group of 32 k at a time

/// Whether the tiles can decode a scheme's weights exactly into bf16: MXFP4 needs normal values
/// (mxfp4_exact_in_bf16), NVFP4 unsigned block scales (nvfp4_scales_unsigned); every E4M3 value is
/// a bf16 number.
[[nodiscard]] inline bool tiles_decode(const quant::mxfp4::weights& w) {
  return kt::mxfp4_exact_in_bf16(w.w13_blocks, w.w13_scales) &&
         kt::mxfp4_exact_in_bf16(w.w2_blocks, w.w2_scales);
}
[[nodiscard]] inline bool tiles_decode(const quant::nvfp4::weights& w) {
  return kt::nvfp4_scales_unsigned(w.w13_scale) && kt::nvfp4_scales_unsigned(w.w2_scale);
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
  using packed = typename td::scheme<Q>::packed;
  using inputs = typename td::scheme<Q>::inputs;
  static constexpr index_t group = Group;
  static packed pack(const typename Q::weights& w, bool huge_pages) {
    packed p = td::scheme<Q>::pack(w, huge_pages);
    p.use_amx = kt::amx_enabled() && tiles_decode(w);
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


/// kernel::tiled_amx at this instruction-set level: its prepared weights (whether the tiles run is
/// decided as they are packed: amx_enabled) and its forward.
struct level : td::level_base<scheme> {

  template <class Q>
  static void run(const kernels::tiled::tuning& t, kernels::tiled::PhaseTimes* phases,
                  const DispatchOutput<format::standard>& d, const prepared<Q>& p, const ExpertMlp& mlp,
                  CombineInput<format::standard> c) {
    if constexpr (std::is_same_v<Q, quant::int8_w8a8> || std::is_same_v<Q, quant::int4_w4a8>)
      kt::forward_int8(d, p, mlp, c.out, t, phases);
    else if constexpr (std::is_same_v<Q, quant::bf16>)
      kt::forward_amx_bf16(d, p, mlp, c.out, t, phases);
    else
      kt::forward_amx_decoded<typename decltype(p.packed)::format, typename scheme<Q>::inputs, scheme<Q>::group>(
          d, p, mlp, c.out, t, phases);
  }
};

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernel::tiled_amx_detail
#endif  // POLYMOE_TILED_GUARD_TILED_AMX_SCHEMES
