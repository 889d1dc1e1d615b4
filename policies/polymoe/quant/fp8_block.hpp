#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <polymoe/core/roles.hpp>
#include <polymoe/core/wire.hpp>
#include <polymoe/quantize/fp8.hpp>
#include <polymoe/quant/checkpoint.hpp>

namespace polymoe::quant {

/// DeepSeek-V3 fp8: E4M3FN weights in 128x128 blocks, each with an fp32 `weight_scale_inv`
/// (W = e4m3(q) · s, s = amax(block) / 448); activations quantized dynamically per token in groups
/// of 128 along K (s = amax(group) / 448).
///
/// Block grids are per projection, as the checkpoint stores them: gate [I, H], up [I, H] and down
/// [H, I] each have their own ceil(rows/128) x ceil(cols/128) grid, so gate and up never share a
/// block even when I is not a multiple of 128. Dimensions that are not multiples of 128 end in
/// partial blocks / groups (the same as zero padding: zeros do not change an amax).
///
///   auto w = polymoe::quant::fp8_block::weights::from_checkpoint(shape, experts);  // DeepSeek tensors
///   polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::fp8_block, polymoe::kernel::tbb_grouped> layer(cfg, {w});
struct fp8_block {
  using quant_concept = quant_tag;
  static constexpr std::string_view name = "fp8_block";
  using activation_wire = wire::e4m3<128>;  ///< dispatched rows travel as codes + per-128 amax
  static constexpr index_t block = 128;  ///< weight block edge and activation group size

  /// One expert as a DeepSeek-V3 checkpoint stores it: `*.weight` F8_E4M3 codes [N, K] and
  /// `*.weight_scale_inv` fp32 [ceil(N/128), ceil(K/128)]. gate [I, H], up [I, H], down [H, I];
  /// a non-gated expert has no `up` (leave its views empty) and its first projection in `gate`.
  struct checkpoint_expert {
    tensor_view<std::uint8_t> gate, up, down;
    tensor_view<float> gate_scale_inv, up_scale_inv, down_scale_inv;
  };

  struct weights : ExpertStore {
    std::vector<std::uint8_t> w13;      ///< [E·rows13, H] E4M3 codes (gate rows, then up rows)
    std::vector<std::uint8_t> w2;       ///< [E·H, I]
    std::vector<float> w13_scale_inv;   ///< [E, parts, ceil(I/128), ceil(H/128)], parts = 2 gated, 1 not
    std::vector<float> w2_scale_inv;    ///< [E, ceil(H/128), ceil(I/128)]

    void validate(std::string_view what) const {
      const ExpertShape& s = shape_;
      const index_t hb = grid(s.hidden), ib = grid(s.intermediate);
      check_sizes(what, {{"w13", w13.size(), count(s.rows13(), s.hidden)},
                         {"w2", w2.size(), count(s.hidden, s.intermediate)},
                         {"w13_scale_inv", w13_scale_inv.size(), count((s.gated ? 2 : 1) * ib, hb)},
                         {"w2_scale_inv", w2_scale_inv.size(), count(hb, ib)}});
    }

    /// From DeepSeek-V3 tensors, one checkpoint_expert per expert (no requantization).
    static weights from_checkpoint(const ExpertShape& s, std::span<const checkpoint_expert> experts,
                                   Matrix b13 = {}, Matrix b2 = {}) {
      constexpr std::string_view what = "quant::fp8_block::weights::from_checkpoint";
      weights w{detail::checked_store(s, what, std::move(b13), std::move(b2)), {}, {}, {}, {}};
      require(static_cast<index_t>(experts.size()) == s.experts, what, ": ", experts.size(),
              " experts given, the shape says ", s.experts);
      const index_t H = s.hidden, I = s.intermediate;
      w.w13.reserve(static_cast<std::size_t>(s.experts * s.rows13() * H));
      w.w2.reserve(static_cast<std::size_t>(s.experts * H * I));
      auto take = [&](const tensor_view<std::uint8_t>& q, const tensor_view<float>& sc, index_t rows, index_t cols,
                      const std::string& nm, std::vector<std::uint8_t>& qs, std::vector<float>& ss) {
        detail::require_shape(q, what, nm + ".weight", {rows, cols});
        detail::require_shape(sc, what, nm + ".weight_scale_inv", {grid(rows), grid(cols)});
        detail::require_scales(sc.data, what, nm + ".weight_scale_inv");
        detail::require_elements(element::e4m3, q.data, what, nm + ".weight");
        qs.insert(qs.end(), q.data.begin(), q.data.end());
        ss.insert(ss.end(), sc.data.begin(), sc.data.end());
      };
      for (index_t e = 0; e < s.experts; ++e) {
        const checkpoint_expert& x = experts[static_cast<std::size_t>(e)];
        const std::string p = "expert " + std::to_string(e) + " ";
        take(x.gate, x.gate_scale_inv, I, H, p + "gate", w.w13, w.w13_scale_inv);
        if (s.gated)
          take(x.up, x.up_scale_inv, I, H, p + "up", w.w13, w.w13_scale_inv);
        else
          require(x.up.data.empty() && x.up_scale_inv.data.empty(), what, ": ", p,
                  "has an up projection but the shape is not gated");
        take(x.down, x.down_scale_inv, H, I, p + "down", w.w2, w.w2_scale_inv);
      }
      return w;
    }
  };

  [[nodiscard]] static constexpr index_t grid(index_t n) noexcept { return polymoe::quantize::blocks_of(n, block); }

  static weights quantize(const ExpertWeights& f) {
    constexpr std::string_view what = "quant::fp8_block::quantize";
    f.validate(what);
    const ExpertShape& s = f.shape;
    const index_t H = s.hidden, I = s.intermediate, parts = s.gated ? 2 : 1;
    const index_t part_scales = grid(I) * grid(H);
    weights w{ExpertStore::from(f), std::vector<std::uint8_t>(static_cast<std::size_t>(f.w13.size())),
              std::vector<std::uint8_t>(static_cast<std::size_t>(f.w2.size())),
              std::vector<float>(static_cast<std::size_t>(s.experts * parts * part_scales)),
              std::vector<float>(static_cast<std::size_t>(s.experts * part_scales))};
    for_each_part(s.experts, 1, [&](index_t e) {
      for (index_t p = 0; p < parts; ++p) {
        const index_t row0 = e * s.rows13() + p * I;
        polymoe::quantize::quantize_e4m3_blocks(f.w13.data() + row0 * H, I, H, H, block, w.w13.data() + row0 * H,
                                                w.w13_scale_inv.data() + (e * parts + p) * part_scales);
      }
      polymoe::quantize::quantize_e4m3_blocks(f.w2.data() + e * H * I, H, I, I, block, w.w2.data() + e * H * I,
                                              w.w2_scale_inv.data() + e * part_scales);
    });
    return w;
  }
  static void dequantize(const weights& w, index_t e, MatrixRef w13, MatrixRef w2) {
    const ExpertShape& s = w.shape_;
    const index_t H = s.hidden, I = s.intermediate, parts = s.gated ? 2 : 1, part_scales = grid(I) * grid(H);
    for (index_t p = 0; p < parts; ++p)
      polymoe::quantize::dequantize_e4m3_blocks(w.w13.data() + (e * s.rows13() + p * I) * H,
                                                w.w13_scale_inv.data() + (e * parts + p) * part_scales, I, H, block,
                                                w13.row(p * I).data(), w13.outerStride());
    polymoe::quantize::dequantize_e4m3_blocks(w.w2.data() + e * H * I, w.w2_scale_inv.data() + e * part_scales, H, I,
                                              block, w2.data(), w2.outerStride());
  }
  static void quantize_activation(std::span<float> row) noexcept { polymoe::quantize::fake_quantize_e4m3(row, block); }
};

/// fp8_block weights with activations left in fp32 (weight-only: W8A16/W8A32). The deepseek_v3_fp8
/// fixture's expected output is this computation.
struct fp8_block_weight_only : fp8_block {
  static constexpr std::string_view name = "fp8_block_weight_only";
  using activation_wire = wire::fp32;
  static void quantize_activation(std::span<float>) noexcept {}
};

/// DeepSeek-V3's tensors: per projection `weight` F8_E4M3 [N, K] and `weight_scale_inv` F32
/// [ceil(N/128), ceil(K/128)]; a layer of them runs fp8_block_weight_only (the checkpoint's own
/// computation keeps activations in full precision) unless told otherwise.
template <>
struct checkpoint_layout<fp8_block::weights> {
  using W = fp8_block::weights;
  using scheme = fp8_block_weight_only;
  static constexpr std::string_view name = "fp8_block", alias = "fp8-block";
  static constexpr std::string_view quantization_config =
      R"({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]})";
  static constexpr auto tensors = std::tuple{
      stored_tensor<&W::w13, &W::w2>{".weight", "", element::e4m3},
      stored_tensor<&W::w13_scale_inv, &W::w2_scale_inv>{".weight_scale_inv", "", element::f32_scale,
                                                         {fp8_block::block, 1}, {fp8_block::block, 1}}};
};

}  // namespace polymoe::quant
