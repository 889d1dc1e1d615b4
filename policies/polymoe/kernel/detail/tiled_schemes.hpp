// kernel::tiled's schemes (how it stores each scheme's weights and rounds its activations) and
// its forward, at one instruction-set level: compiled once per level (kernels/tiled/level.hpp),
// reached through tiled_levels.hpp.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_TILED_SCHEMES) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_TILED_SCHEMES
#undef POLYMOE_TILED_GUARD_TILED_SCHEMES
#else
#define POLYMOE_TILED_GUARD_TILED_SCHEMES
#endif
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include <polymoe/core/detail/dependent_false.hpp>
#include <polymoe/core/formats.hpp>
#include <polymoe/kernels/tiled/act_quant.hpp>
#include <polymoe/kernels/tiled/amx_forward.hpp>
#include <polymoe/kernels/tiled/forward.hpp>
#include <polymoe/kernels/tiled/int8_forward.hpp>
#include <polymoe/kernels/tiled/phases.hpp>
#include <polymoe/kernels/tiled/tuning.hpp>
#include <polymoe/quant/bf16.hpp>
#include <polymoe/quant/fp32.hpp>
#include <polymoe/quant/fp8.hpp>
#include <polymoe/quant/fp8_block.hpp>
#include <polymoe/quant/int4_w4a8.hpp>
#include <polymoe/quant/int8_w8a8.hpp>
#include <polymoe/quant/mxfp4.hpp>
#include <polymoe/quant/nvfp4.hpp>

namespace polymoe::kernel::tiled_detail {
POLYMOE_TILED_LEVEL_BEGIN


/// How the tiled kernel stores a scheme's weights and rounds its activations. The primary template
/// exists only to fail: the pairing table lists the schemes that have a specialisation. Each
/// pack(w, huge_pages) allocates its buffers as tuning::huge_pages says.
template <class Q>
struct scheme {
  static_assert(polymoe::detail::dependent_false<Q>,
                "polymoe: kernel::tiled has no specialisation for this quant scheme; a scheme_row that names "
                "kernel::tiled in on<...> needs one. Through MoeLayer, the pairing table's diagnostic lists the "
                "schemes it implements (kernel::reference and kernel::tbb_grouped run every scheme)");
};

namespace kt = kernels::tiled::POLYMOE_TILED_LEVEL;

/// Biases of expert e as the packers want them: a row pointer or nullptr.
template <class Store>
auto bias_rows(const Store& w) {
  return std::pair{[&w](index_t e) { return w.b13_of(e); }, [&w](index_t e) { return w.b2_of(e); }};
}

template <>
struct scheme<quant::fp32> {
  using packed = kt::PackedExperts<float>;
  using inputs = kt::keep_inputs;  // quant::fp32::quantize_activation is the identity
  static packed pack(const quant::fp32::weights& w, bool huge_pages) {
    const ExpertShape s = w.shape();
    return kt::pack_experts<float>(
        s, [&](index_t e, index_t r, index_t c) { return w.w13(e * s.rows13() + r, c); },
        [&](index_t e, index_t r, index_t c) { return w.w2(e * s.hidden + r, c); }, bias_rows(w).first,
        bias_rows(w).second, huge_pages);
  }
};

/// bf16: panels of fp32-widened weights for the FMA micro-kernels, or, where the target runs
/// vdpbf16ps (POLYMOE_TILED_DPBF16), the tile layout of kernel::tiled_amx (k-pairs interleaved)
/// run by its bf16-row pipeline without tiles.
template <>
struct scheme<quant::bf16> {
  static constexpr bool pairs = POLYMOE_TILED_DPBF16;
  using layout = std::conditional_t<pairs, kt::amx_layout, kt::row_layout>;
  using packed = kt::PackedExperts<std::uint16_t, layout>;
  using inputs = kt::bf16_inputs;  // quant::bf16::quantize_activation rounds to bf16
  /// The weights in layout L (kernel::tiled_amx packs them in its tile layout with this too).
  template <class L>
  static kt::PackedExperts<std::uint16_t, L> pack_in(const quant::bf16::weights& w, bool huge_pages) {
    const ExpertShape s = w.shape();
    const index_t H = s.hidden, I = s.intermediate, R = s.rows13();
    const auto [b13, b2] = bias_rows(w);
    return kt::pack_experts<std::uint16_t, L>(
        s, [&](index_t e, index_t r, index_t c) { return w.w13[static_cast<std::size_t>((e * R + r) * H + c)]; },
        [&](index_t e, index_t r, index_t c) { return w.w2[static_cast<std::size_t>((e * H + r) * I + c)]; }, b13,
        b2, huge_pages);
  }
  static packed pack(const quant::bf16::weights& w, bool huge_pages) { return pack_in<layout>(w, huge_pages); }
};


template <>
struct scheme<quant::fp8> {
  using packed = kt::QPackedExperts<kt::fp8_format>;
  using inputs = kt::e4m3_inputs<0>;  // quant::fp8::quantize_activation: one group a row
  static packed pack(const quant::fp8::weights& w, bool huge_pages) {
    const ExpertShape s = w.shape();
    const index_t H = s.hidden, I = s.intermediate, R = s.rows13();
    const auto [b13, b2] = bias_rows(w);
    return kt::pack_quantized<kt::fp8_format>(
        s, [&](index_t e, index_t r, index_t k) { return w.w13[static_cast<std::size_t>((e * R + r) * H + k)]; },
        [&](index_t e, index_t, index_t) { return w.w13_scale[static_cast<std::size_t>(e)]; },
        std::vector<float>(static_cast<std::size_t>(s.experts), 1.0f),
        [&](index_t e, index_t r, index_t k) { return w.w2[static_cast<std::size_t>((e * H + r) * I + k)]; },
        [&](index_t e, index_t, index_t) { return w.w2_scale[static_cast<std::size_t>(e)]; },
        std::vector<float>(static_cast<std::size_t>(s.experts), 1.0f), b13, b2, huge_pages);
  }
};

template <>
struct scheme<quant::fp8_block> {
  using packed = kt::QPackedExperts<kt::fp8_format>;
  using inputs = kt::e4m3_inputs<quant::fp8_block::block>;
  static_assert(kt::fp8_format::group == quant::fp8_block::block && quant::fp8_block::block % kt::panel_cols == 0,
                "a panel must lie inside one 128-column scale block");
  static packed pack(const quant::fp8_block::weights& w, bool huge_pages) {
    const ExpertShape s = w.shape();
    const index_t H = s.hidden, I = s.intermediate, R = s.rows13(), parts = s.gated ? 2 : 1;
    const index_t gH = quant::fp8_block::grid(H), gI = quant::fp8_block::grid(I), B = quant::fp8_block::block;
    const auto [b13, b2] = bias_rows(w);
    return kt::pack_quantized<kt::fp8_format>(
        s, [&](index_t e, index_t r, index_t k) { return w.w13[static_cast<std::size_t>((e * R + r) * H + k)]; },
        [&](index_t e, index_t r, index_t g) {  // part (gate / up), then the row's block row
          return w.w13_scale_inv[static_cast<std::size_t>(((e * parts + r / I) * gI + (r % I) / B) * gH + g)];
        },
        std::vector<float>(static_cast<std::size_t>(s.experts), 1.0f),
        [&](index_t e, index_t r, index_t k) { return w.w2[static_cast<std::size_t>((e * H + r) * I + k)]; },
        [&](index_t e, index_t r, index_t g) {
          return w.w2_scale_inv[static_cast<std::size_t>((e * gH + r / B) * gI + g)];
        },
        std::vector<float>(static_cast<std::size_t>(s.experts), 1.0f), b13, b2, huge_pages);
  }
};

template <>
struct scheme<quant::fp8_block_weight_only> : scheme<quant::fp8_block> {
  using inputs = kt::keep_inputs;
};

/// E2M1 code (a nibble, element 2i low) of element k of a packed row.
[[nodiscard]] inline std::uint8_t nibble(const std::uint8_t* row, index_t k) noexcept {
  const std::uint8_t byte = row[k / 2];
  return static_cast<std::uint8_t>(k % 2 ? byte >> 4 : byte & 0xF);
}

template <>
struct scheme<quant::mxfp4> {
  using packed = kt::QPackedExperts<kt::mxfp4_format>;
  using inputs = kt::keep_inputs;
  static packed pack(const quant::mxfp4::weights& w, bool huge_pages) {
    const ExpertShape s = w.shape();
    const index_t H = s.hidden, R = s.rows13(), nbH = quant::mxfp4::blocks_per_row(H);
    const index_t nbI = quant::mxfp4::blocks_per_row(s.intermediate);
    const auto [b13, b2] = bias_rows(w);
    return kt::pack_quantized<kt::mxfp4_format>(
        s, [&](index_t e, index_t r, index_t k) { return nibble(w.w13_blocks.data() + (e * R + r) * nbH * 16, k); },
        [&](index_t e, index_t r, index_t g) { return w.w13_scales[static_cast<std::size_t>((e * R + r) * nbH + g)]; },
        std::vector<float>(static_cast<std::size_t>(s.experts), 1.0f),
        [&](index_t e, index_t r, index_t k) { return nibble(w.w2_blocks.data() + (e * H + r) * nbI * 16, k); },
        [&](index_t e, index_t r, index_t g) { return w.w2_scales[static_cast<std::size_t>((e * H + r) * nbI + g)]; },
        std::vector<float>(static_cast<std::size_t>(s.experts), 1.0f), b13, b2, huge_pages);
  }
};

template <>
struct scheme<quant::nvfp4> {
  using packed = kt::QPackedExperts<kt::nvfp4_format>;
  using inputs = kt::keep_inputs;
  static packed pack(const quant::nvfp4::weights& w, bool huge_pages) {
    const ExpertShape s = w.shape();
    const index_t H = s.hidden, R = s.rows13(), nbH = quant::nvfp4::blocks_per_row(H);
    const index_t nbI = quant::nvfp4::blocks_per_row(s.intermediate);
    const auto [b13, b2] = bias_rows(w);
    return kt::pack_quantized<kt::nvfp4_format>(
        s, [&](index_t e, index_t r, index_t k) { return nibble(w.w13.data() + (e * R + r) * nbH * 8, k); },
        [&](index_t e, index_t r, index_t g) { return w.w13_scale[static_cast<std::size_t>((e * R + r) * nbH + g)]; },
        w.w13_scale_2,
        [&](index_t e, index_t r, index_t k) { return nibble(w.w2.data() + (e * H + r) * nbI * 8, k); },
        [&](index_t e, index_t r, index_t g) { return w.w2_scale[static_cast<std::size_t>((e * H + r) * nbI + g)]; },
        w.w2_scale_2, b13, b2, huge_pages);
  }
};

/// W4A16: the 4-bit formats' panels; each GEMM input row rounded to bf16 (on the way in, and in
/// GEMM 1's epilogue), as for quant::bf16.
template <>
struct scheme<quant::mxfp4_w4a16> : scheme<quant::mxfp4> {
  using inputs = kt::bf16_inputs;
};
template <>
struct scheme<quant::nvfp4_w4a16> : scheme<quant::nvfp4> {
  using inputs = kt::bf16_inputs;
};

/// NVFP4 W4A4: nvfp4's panels; each GEMM input row quantized to NVFP4 values as the scheme does
/// (vectorized, bit for bit quantize_activation) before the fp32 micro-kernels.
template <>
struct scheme<quant::nvfp4_w4a4> : scheme<quant::nvfp4> {
  using inputs = kt::nvfp4_w4a4_inputs;
};

template <>
struct scheme<quant::int8_w8a8> {
  using packed = kt::Int8PackedExperts;
  /// `amx`: the tile layout for tdpbusd (kernel::tiled_amx on a machine with AMX).
  static packed pack(const quant::int8_w8a8::weights& w, bool huge_pages, bool amx = false) {
    const ExpertShape s = w.shape();
    const index_t H = s.hidden, I = s.intermediate, R = s.rows13();
    const auto [b13, b2] = bias_rows(w);
    return kt::pack_int8(
        s, [&](index_t e, index_t r, index_t k) { return w.w13[static_cast<std::size_t>((e * R + r) * H + k)]; },
        [&](index_t e, index_t r) { return w.w13_scale[static_cast<std::size_t>(e * R + r)]; },
        [&](index_t e, index_t r, index_t k) { return w.w2[static_cast<std::size_t>((e * H + r) * I + k)]; },
        [&](index_t e, index_t r) { return w.w2_scale[static_cast<std::size_t>(e * H + r)]; }, b13, b2, amx,
        huge_pages);
  }
};

/// int4 W4A8: int8's panels (either layout) with the codes kept as nibbles and a scale per column
/// per group of 32 k, unpacked to int8 for int8's integer GEMMs (kernels/tiled/int4.hpp).
template <>
struct scheme<quant::int4_w4a8> {
  using packed = kt::Int4PackedExperts;
  /// `amx`: int8's tile layout, for tdpbusd (kernel::tiled_amx on a machine with AMX).
  static packed pack(const quant::int4_w4a8::weights& w, bool huge_pages, bool amx = false) {
    const ExpertShape s = w.shape();
    const index_t R = s.rows13(), H = s.hidden;
    const index_t bH = quant::int4_w4a8::row_bytes(H), bI = quant::int4_w4a8::row_bytes(s.intermediate);
    const index_t gH = quant::int4_w4a8::groups_per_row(H), gI = quant::int4_w4a8::groups_per_row(s.intermediate);
    const auto [b13, b2] = bias_rows(w);
    return kt::pack_int4(
        s, [&](index_t e, index_t r, index_t k) { return quantize::int4_code(w.w13.data() + (e * R + r) * bH, k); },
        [&](index_t e, index_t r, index_t g) { return w.w13_scale[static_cast<std::size_t>((e * R + r) * gH + g)]; },
        [&](index_t e, index_t r, index_t k) { return quantize::int4_code(w.w2.data() + (e * H + r) * bI, k); },
        [&](index_t e, index_t r, index_t g) { return w.w2_scale[static_cast<std::size_t>((e * H + r) * gI + g)]; },
        b13, b2, amx, huge_pages);
  }
};

/// A tiled kernel at this instruction-set level, its weights packed as Scheme<Q> says (kernel::tiled's
/// schemes, or kernel::tiled_amx's): the level, the prepared weights, and prepare.
template <template <class> class Scheme>
struct level_base {
  static constexpr kernels::tiled::isa_level id = kernels::tiled::isa_level::POLYMOE_TILED_LEVEL;

  template <class Q>
  using prepared = kt::Prepared<typename Scheme<Q>::packed>;

  template <class Q>
  static prepared<Q> prepare(const kernels::tiled::tuning& t, const typename Q::weights& w) {
    return prepared<Q>{Scheme<Q>::pack(w, t.huge_pages), kt::Workspace(t.huge_pages)};
  }
};

/// kernel::tiled at this instruction-set level: its prepared weights and its forward.
struct level : level_base<scheme> {

  template <class Q>
  static void run(const kernels::tiled::tuning& t, kernels::tiled::PhaseTimes* phases,
                  const DispatchOutput<format::standard>& d, const prepared<Q>& p, const ExpertMlp& mlp,
                  CombineInput<format::standard> c) {
    if constexpr (std::is_same_v<Q, quant::int8_w8a8> || std::is_same_v<Q, quant::int4_w4a8>)
      kt::forward_int8(d, p, mlp, c.out, t, phases);
    else if constexpr (std::is_same_v<Q, quant::bf16> && scheme<quant::bf16>::pairs)
      kt::forward_amx_bf16(d, p, mlp, c.out, t, phases);
    else
      kt::forward_standard<typename scheme<Q>::inputs>(d, p, mlp, c.out, t, phases);
  }
};

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernel::tiled_detail
#endif  // POLYMOE_TILED_GUARD_TILED_SCHEMES
