#pragma once
// Expert tensors in the layouts real checkpoints use, produced lazily (one expert at a time) for
// io::write_checkpoint; shared by `polymoe quantize` and `polymoe make-checkpoint`.
//
//   per-expert families (mixtral, qwen2_moe, qwen3_moe, deepseek_v3), per projection P:
//     float      P.weight [N, K] F32 or BF16
//     fp8-block  P.weight F8_E4M3 [N, K] + P.weight_scale_inv F32 [ceil(N/128), ceil(K/128)] (DeepSeek-V3)
//     mxfp4      P.weight U8 [N, K/2] + P.weight_scale U8 (E8M0) [N, K/32]
//     nvfp4      P.weight U8 [N, K/2] + P.weight_scale F8_E4M3 [N, K/16] + P.weight_scale_2 F32 [] (ModelOpt)
//     int8       P.weight I8 [N, K] + P.weight_scale F32 [N, 1] (per output channel)
//   gpt_oss (stacked, gate/up interleaved): float gate_up_proj [E, H, 2I], down_proj [E, I, H];
//     mxfp4 gate_up_proj_blocks [E, 2I, H/32, 16], gate_up_proj_scales [E, 2I, H/32],
//     down_proj_blocks [E, H, I/32, 16], down_proj_scales [E, H, I/32]; biases F32 [E, 2I], [E, H].
#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <map>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <polymoe/io/checkpoint_files.hpp>
#include <polymoe/io/hf_checkpoint.hpp>
#include <polymoe/io/model_presets.hpp>
#include <polymoe/codecs/bf16.hpp>

namespace polymoe::cli {

/// How the written checkpoint stores its experts.
using out_scheme = io::stored_dtype;

/// `--scheme` of quantize: mxfp4, nvfp4, fp8-block, int8 (also fp8_block, int8_w8a8).
inline out_scheme parse_out_scheme(std::string_view s) {
  if (s == "mxfp4") return out_scheme::mxfp4;
  if (s == "nvfp4") return out_scheme::nvfp4;
  if (s == "fp8-block" || s == "fp8_block") return out_scheme::fp8_block;
  if (s == "int8" || s == "int8_w8a8") return out_scheme::int8;
  throw error(detail::concat("quantize: unknown --scheme '", s, "' (valid: mxfp4, nvfp4, fp8-block, int8)"));
}

/// config.json quantization_config for a scheme (what the real checkpoints of that kind carry).
inline io::json quantization_config(out_scheme s, io::hf_family f) {
  io::json q = io::json::object();
  switch (s) {
    case out_scheme::fp8_block:
      q.set("quant_method", "fp8"), q.set("fmt", "e4m3"), q.set("activation_scheme", "dynamic");
      q.set("weight_block_size", io::json::array({io::json(128), io::json(128)}));
      break;
    case out_scheme::mxfp4:
      q.set("quant_method", "mxfp4");
      if (f == io::hf_family::gpt_oss)
        q.set("modules_to_not_convert", io::json::array({io::json("model.layers.*.self_attn"),
                                                         io::json("model.layers.*.mlp.router"),
                                                         io::json("model.embed_tokens"), io::json("lm_head")}));
      break;
    case out_scheme::nvfp4:
      q.set("quant_method", "modelopt"), q.set("quant_algo", "NVFP4"), q.set("group_size", 16);
      break;
    case out_scheme::int8:
      q.set("quant_method", "w8a8_int8");
      break;
    default:
      break;
  }
  return q;
}

/// fp32 experts on demand (one at a time; e = -1 is the shared expert) and their quantized form,
/// cached (by default only the last one) so the tensors of one expert come from one quantization.
class expert_provider {
 public:
  using stored = std::variant<ExpertWeights, quant::fp8_block::weights, quant::mxfp4::weights, quant::nvfp4::weights,
                              quant::int8_w8a8::weights>;
  expert_provider(out_scheme s, std::function<ExpertWeights(index_t)> routed, std::function<ExpertWeights()> shared)
      : scheme_(s), routed_(std::move(routed)), shared_(std::move(shared)) {}

  [[nodiscard]] out_scheme scheme() const noexcept { return scheme_; }
  /// How many experts to keep (stacked layouts walk every expert once per tensor).
  void keep(std::size_t n) { capacity_ = std::max<std::size_t>(1, n); }

  const stored& get(index_t e) {
    if (const auto it = cache_.find(e); it != cache_.end()) return it->second;
    ExpertWeights f = e < 0 ? shared_() : routed_(e);
    stored v;
    switch (scheme_) {
      case out_scheme::f32:
      case out_scheme::bf16: v = std::move(f); break;
      case out_scheme::fp8_block: v = quant::fp8_block::quantize(f); break;
      case out_scheme::mxfp4: v = quant::mxfp4::quantize(f); break;
      case out_scheme::nvfp4: v = quant::nvfp4::quantize(f); break;
      case out_scheme::int8: v = quant::int8_w8a8::quantize(f); break;
    }
    while (cache_.size() >= capacity_) cache_.erase(order_.front()), order_.pop_front();
    order_.push_back(e);
    return cache_.emplace(e, std::move(v)).first->second;
  }
  template <class W>
  const W& get_as(index_t e) {
    return std::get<W>(get(e));
  }

 private:
  out_scheme scheme_;
  std::function<ExpertWeights(index_t)> routed_;
  std::function<ExpertWeights()> shared_;
  std::size_t capacity_ = 1;
  std::map<index_t, stored> cache_;
  std::deque<index_t> order_;
};

namespace layout_detail {
inline void put(std::span<std::byte> out, const void* src, std::size_t n) {
  require(out.size() == n, "layout: internal size mismatch (", out.size(), " vs ", n, ")");
  if (n) std::memcpy(out.data(), src, n);
}
/// fp32 values written as F32 or BF16.
inline void put_floats(std::span<std::byte> out, const float* src, std::size_t n, io::dtype d) {
  if (d == io::dtype::F32) return put(out, src, n * 4);
  std::vector<std::uint16_t> h(n);
  for (std::size_t i = 0; i < n; ++i) h[i] = codecs::float_to_bf16(src[i]);
  put(out, h.data(), n * 2);
}
}  // namespace layout_detail

/// Appends the expert tensors of layer n (routed experts and the shared expert) in the family's
/// layout for the provider's scheme.
inline void add_expert_tensors(std::vector<io::tensor_source>& out, const io::hf_names& names, index_t n,
                               const MoeConfig& c, std::shared_ptr<expert_provider> P) {
  using io::dtype;
  using namespace layout_detail;
  const out_scheme s = P->scheme();
  const dtype fdt = s == out_scheme::bf16 ? dtype::BF16 : dtype::F32;
  const index_t E = c.num_experts, H = c.hidden, I = c.intermediate;
  if (names.family == io::hf_family::gpt_oss) {
    auto add = [&](std::string what, dtype d, std::vector<std::int64_t> shape,
                   std::function<void(index_t, std::byte*)> per_expert) {
      std::int64_t per = static_cast<std::int64_t>(io::dtype_size(d));
      for (std::size_t i = 1; i < shape.size(); ++i) per *= shape[i];
      out.push_back({names.stacked(n, what), d, std::move(shape), [E, per, per_expert](std::span<std::byte> b) {
                       for (index_t e = 0; e < E; ++e) per_expert(e, b.data() + e * per);
                     }});
    };
    // interleave canonical rows [gate | up] -> 2j gate, 2j + 1 up
    auto interleave_bias = [I](const Matrix& b13, std::byte* dst, dtype d) {
      std::vector<float> v(static_cast<std::size_t>(2 * I));
      for (index_t j = 0; j < I; ++j) v[2 * j] = b13(0, j), v[2 * j + 1] = b13(0, I + j);
      put_floats({dst, v.size() * io::dtype_size(d)}, v.data(), v.size(), d);
    };
    auto bias_of = [P](index_t e) -> std::pair<Matrix, Matrix> {
      return std::visit([](const auto& w) { return std::pair<Matrix, Matrix>{w.b13, w.b2}; }, P->get(e));
    };
    const dtype bdt = (s == out_scheme::bf16) ? dtype::BF16 : dtype::F32;
    add("gate_up_proj_bias", bdt, {E, 2 * I}, [=](index_t e, std::byte* d) { interleave_bias(bias_of(e).first, d, bdt); });
    add("down_proj_bias", bdt, {E, H}, [=](index_t e, std::byte* d) {
      const Matrix b2 = bias_of(e).second;
      put_floats({d, static_cast<std::size_t>(H) * io::dtype_size(bdt)}, b2.data(), static_cast<std::size_t>(H), bdt);
    });
    if (s == out_scheme::f32 || s == out_scheme::bf16) {
      add("gate_up_proj", fdt, {E, H, 2 * I}, [=](index_t e, std::byte* d) {
        const auto& w = P->get_as<ExpertWeights>(e);
        std::vector<float> v(static_cast<std::size_t>(H * 2 * I));
        for (index_t h = 0; h < H; ++h)
          for (index_t j = 0; j < I; ++j) v[h * 2 * I + 2 * j] = w.w13(j, h), v[h * 2 * I + 2 * j + 1] = w.w13(I + j, h);
        put_floats({d, v.size() * io::dtype_size(fdt)}, v.data(), v.size(), fdt);
      });
      add("down_proj", fdt, {E, I, H}, [=](index_t e, std::byte* d) {
        const auto& w = P->get_as<ExpertWeights>(e);
        const Matrix t = w.w2.transpose();  // [I, H]
        put_floats({d, static_cast<std::size_t>(t.size()) * io::dtype_size(fdt)}, t.data(),
                   static_cast<std::size_t>(t.size()), fdt);
      });
      return;
    }
    require(s == out_scheme::mxfp4, "quantize: gpt_oss checkpoints store experts stacked; polymoe writes them as ",
            "float or mxfp4 (the GPT-OSS layout), not as another scheme");
    P->keep(static_cast<std::size_t>(E));  // quantized experts are small: quantize each once, not once per tensor
    const index_t nbH = quant::mxfp4::blocks_per_row(H), nbI = quant::mxfp4::blocks_per_row(I);
    auto rows_interleaved = [I](const std::vector<std::uint8_t>& src, index_t row_bytes, std::byte* dst) {
      for (index_t j = 0; j < I; ++j) {
        std::memcpy(dst + (2 * j) * row_bytes, src.data() + j * row_bytes, static_cast<std::size_t>(row_bytes));
        std::memcpy(dst + (2 * j + 1) * row_bytes, src.data() + (I + j) * row_bytes, static_cast<std::size_t>(row_bytes));
      }
    };
    add("gate_up_proj_blocks", dtype::U8, {E, 2 * I, nbH, 16},
        [=](index_t e, std::byte* d) { rows_interleaved(P->get_as<quant::mxfp4::weights>(e).w13_blocks, nbH * 16, d); });
    add("gate_up_proj_scales", dtype::U8, {E, 2 * I, nbH},
        [=](index_t e, std::byte* d) { rows_interleaved(P->get_as<quant::mxfp4::weights>(e).w13_scales, nbH, d); });
    add("down_proj_blocks", dtype::U8, {E, H, nbI, 16}, [=](index_t e, std::byte* d) {
      const auto& v = P->get_as<quant::mxfp4::weights>(e).w2_blocks;
      std::memcpy(d, v.data(), v.size());
    });
    add("down_proj_scales", dtype::U8, {E, H, nbI}, [=](index_t e, std::byte* d) {
      const auto& v = P->get_as<quant::mxfp4::weights>(e).w2_scales;
      std::memcpy(d, v.data(), v.size());
    });
    return;
  }

  // per-expert families
  auto expert = [&](index_t e, const std::string& prefix, index_t inter) {
    const std::array<std::string, 3> proj{names.gate(), names.up(), names.down()};
    for (int p = 0; p < 3; ++p) {
      const index_t rows = p < 2 ? inter : H, cols = p < 2 ? H : inter;
      const std::string base = prefix + proj[static_cast<std::size_t>(p)];
      auto add = [&](std::string suffix, dtype d, std::vector<std::int64_t> shape, auto fill) {
        out.push_back({base + suffix, d, std::move(shape), [P, e, fill](std::span<std::byte> b) { fill(*P, e, b); }});
      };
      switch (s) {
        case out_scheme::f32:
        case out_scheme::bf16:
          add(".weight", fdt, {rows, cols}, [p, inter, fdt](expert_provider& pr, index_t ee, std::span<std::byte> b) {
            const auto& w = pr.get_as<ExpertWeights>(ee);
            const Matrix m = p == 0 ? Matrix(w.w13.topRows(inter)) : p == 1 ? Matrix(w.w13.bottomRows(inter)) : w.w2;
            put_floats(b, m.data(), static_cast<std::size_t>(m.size()), fdt);
          });
          break;
        case out_scheme::fp8_block: {
          const index_t gr = quant::fp8_block::grid(rows), gc = quant::fp8_block::grid(cols);
          add(".weight", dtype::F8_E4M3, {rows, cols}, [p, rows, cols](expert_provider& pr, index_t ee, std::span<std::byte> b) {
            const auto& w = pr.get_as<quant::fp8_block::weights>(ee);
            const auto& v = p < 2 ? w.w13 : w.w2;
            put(b, v.data() + (p == 1 ? rows * cols : 0), static_cast<std::size_t>(rows * cols));
          });
          add(".weight_scale_inv", dtype::F32, {gr, gc}, [p, gr, gc](expert_provider& pr, index_t ee, std::span<std::byte> b) {
            const auto& w = pr.get_as<quant::fp8_block::weights>(ee);
            const auto& v = p < 2 ? w.w13_scale_inv : w.w2_scale_inv;
            put(b, v.data() + (p == 1 ? gr * gc : 0), static_cast<std::size_t>(gr * gc) * 4);
          });
          break;
        }
        case out_scheme::mxfp4: {
          const index_t nb = quant::mxfp4::blocks_per_row(cols);
          add(".weight", dtype::U8, {rows, nb * 16}, [p, rows, nb](expert_provider& pr, index_t ee, std::span<std::byte> b) {
            const auto& w = pr.get_as<quant::mxfp4::weights>(ee);
            const auto& v = p < 2 ? w.w13_blocks : w.w2_blocks;
            put(b, v.data() + (p == 1 ? rows * nb * 16 : 0), static_cast<std::size_t>(rows * nb * 16));
          });
          add(".weight_scale", dtype::U8, {rows, nb}, [p, rows, nb](expert_provider& pr, index_t ee, std::span<std::byte> b) {
            const auto& w = pr.get_as<quant::mxfp4::weights>(ee);
            const auto& v = p < 2 ? w.w13_scales : w.w2_scales;
            put(b, v.data() + (p == 1 ? rows * nb : 0), static_cast<std::size_t>(rows * nb));
          });
          break;
        }
        case out_scheme::nvfp4: {
          const index_t nb = quant::nvfp4::blocks_per_row(cols);
          add(".weight", dtype::U8, {rows, nb * 8}, [p, rows, nb](expert_provider& pr, index_t ee, std::span<std::byte> b) {
            const auto& w = pr.get_as<quant::nvfp4::weights>(ee);
            const auto& v = p < 2 ? w.w13 : w.w2;
            put(b, v.data() + (p == 1 ? rows * nb * 8 : 0), static_cast<std::size_t>(rows * nb * 8));
          });
          add(".weight_scale", dtype::F8_E4M3, {rows, nb}, [p, rows, nb](expert_provider& pr, index_t ee, std::span<std::byte> b) {
            const auto& w = pr.get_as<quant::nvfp4::weights>(ee);
            const auto& v = p < 2 ? w.w13_scale : w.w2_scale;
            put(b, v.data() + (p == 1 ? rows * nb : 0), static_cast<std::size_t>(rows * nb));
          });
          add(".weight_scale_2", dtype::F32, {}, [p](expert_provider& pr, index_t ee, std::span<std::byte> b) {
            const auto& w = pr.get_as<quant::nvfp4::weights>(ee);
            put(b, p < 2 ? w.w13_scale_2.data() : w.w2_scale_2.data(), 4);
          });
          break;
        }
        case out_scheme::int8:
          add(".weight", dtype::I8, {rows, cols}, [p, rows, cols](expert_provider& pr, index_t ee, std::span<std::byte> b) {
            const auto& w = pr.get_as<quant::int8_w8a8::weights>(ee);
            const auto& v = p < 2 ? w.w13 : w.w2;
            put(b, v.data() + (p == 1 ? rows * cols : 0), static_cast<std::size_t>(rows * cols));
          });
          add(".weight_scale", dtype::F32, {rows, 1}, [p, rows](expert_provider& pr, index_t ee, std::span<std::byte> b) {
            const auto& w = pr.get_as<quant::int8_w8a8::weights>(ee);
            const auto& v = p < 2 ? w.w13_scale : w.w2_scale;
            put(b, v.data() + (p == 1 ? rows : 0), static_cast<std::size_t>(rows) * 4);
          });
          break;
      }
    }
  };
  for (index_t e = 0; e < E; ++e) expert(e, names.expert(n, e), I);
  if (c.shared_intermediate > 0) expert(-1, names.shared(n), c.shared_intermediate);
}

}  // namespace polymoe::cli
