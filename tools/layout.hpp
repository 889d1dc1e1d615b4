#pragma once
// Expert tensors in the layouts real checkpoints use, produced lazily (one expert at a time) for
// io::write_checkpoint; shared by `polymoe quantize` and `polymoe make-checkpoint`. Float weights
// are P.weight [N, K] F32 or BF16 per projection P (gpt_oss: stacked gate_up_proj [E, H, 2I] with
// gate/up interleaved, down_proj [E, I, H], biases [E, 2I], [E, H]); quantized weights are written
// in their scheme's checkpoint layout (quant::checkpoint_layout, declared next to the scheme; in
// gpt_oss its stacked form), the one the loader reads.
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
#include <polymoe/io/stored_layouts.hpp>
#include <polymoe/codecs/bf16.hpp>

namespace polymoe::cli {

/// How the written checkpoint stores its experts: float (F32 or BF16) or a scheme's layout.
struct out_scheme {
  io::stored_scheme layout = io::stored_scheme::float_weights();
  io::dtype float_dtype = io::dtype::F32;
  [[nodiscard]] bool is_float() const noexcept { return layout.is_float(); }
};

/// The names quantize's --scheme takes: each layout's name and alias, and the table's schemes whose
/// weights a layout stores ("fp8_block", "fp8-block", "fp8_block_weight_only", "mxfp4", ...).
inline std::vector<std::string> stored_names() {
  std::vector<std::string> names;
  io::for_each_stored_name([&](std::string_view n, io::stored_scheme) {
    if (std::find(names.begin(), names.end(), n) == names.end()) names.emplace_back(n);
  });
  return names;
}

/// stored_names() for messages: "fp8_block, fp8-block, ...".
inline std::string layout_names() {
  std::string out;
  for (const auto& n : stored_names()) out += std::string(out.empty() ? "" : ", ") + n;
  return out;
}

/// `--scheme` of quantize: a layout's name or alias (mxfp4, nvfp4, fp8-block, int8, ...); with
/// `floats`, also f32 and bf16 (the presets' stored forms).
inline out_scheme parse_out_scheme(std::string_view s, bool floats = false) {
  if (floats && (s == "f32" || s == "bf16")) return {io::stored_scheme::float_weights(), s == "f32" ? io::dtype::F32 : io::dtype::BF16};
  const io::stored_scheme l = io::stored_scheme::named(s);
  require(l.index >= 0, "quantize: unknown --scheme '", s, "' (valid: ", floats ? "f32, bf16, " : "", layout_names(), ")");
  return {l, io::dtype::F32};
}

/// config.json quantization_config for a scheme (what the real checkpoints of that kind carry);
/// an empty object for float weights.
inline io::json quantization_config(out_scheme s, io::hf_family f) {
  if (s.is_float()) return io::json::object();
  io::json q = io::with_layout(s.layout, []<class W>(boost::mp11::mp_identity<W>) {
    return io::parse_json(quant::checkpoint_layout<W>::quantization_config, "a checkpoint layout's quantization_config");
  });
  if (f == io::hf_family::gpt_oss)  // GPT-OSS's own: what its quantization leaves in full precision
    q.set("modules_to_not_convert", io::json::array({io::json("model.layers.*.self_attn"),
                                                     io::json("model.layers.*.mlp.router"),
                                                     io::json("model.embed_tokens"), io::json("lm_head")}));
  return q;
}

/// fp32 experts on demand (one at a time; e = -1 is the shared expert) and their quantized form,
/// cached (by default only the last one) so the tensors of one expert come from one quantization.
class expert_provider {
 public:
  using stored = io::stored_experts;
  expert_provider(out_scheme s, std::function<ExpertWeights(index_t)> routed, std::function<ExpertWeights()> shared)
      : scheme_(s), routed_(std::move(routed)), shared_(std::move(shared)) {}

  [[nodiscard]] out_scheme scheme() const noexcept { return scheme_; }
  /// How many experts to keep (stacked layouts walk every expert once per tensor).
  void keep(std::size_t n) { capacity_ = std::max<std::size_t>(1, n); }

  const stored& get(index_t e) {
    if (const auto it = cache_.find(e); it != cache_.end()) return it->second;
    ExpertWeights f = e < 0 ? shared_() : routed_(e);
    stored v = scheme_.is_float() ? stored(std::move(f)) : io::with_layout(scheme_.layout, [&]<class W>(boost::mp11::mp_identity<W>) {
      return stored(quant::checkpoint_layout<W>::scheme::quantize(f));
    });
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
  const dtype fdt = s.float_dtype;
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
    add("gate_up_proj_bias", fdt, {E, 2 * I}, [=](index_t e, std::byte* d) { interleave_bias(bias_of(e).first, d, fdt); });
    add("down_proj_bias", fdt, {E, H}, [=](index_t e, std::byte* d) {
      const Matrix b2 = bias_of(e).second;
      put_floats({d, static_cast<std::size_t>(H) * io::dtype_size(fdt)}, b2.data(), static_cast<std::size_t>(H), fdt);
    });
    if (s.is_float()) {
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
    P->keep(static_cast<std::size_t>(E));  // quantized experts are small: quantize each once, not once per tensor
    io::with_layout(s.layout, [&]<class W>(boost::mp11::mp_identity<W>) {
      io::for_each_stored_tensor<W>([&](const auto& t) {
        require(!t.stacked.empty() && !t.scalar, "quantize: gpt_oss checkpoints store experts stacked, which the ",
                quant::checkpoint_layout<W>::name, " layout has no form for");
        const dtype d = io::dtypes_of(t.type).front();
        const auto f13 = t.field13, f2 = t.field2;
        // gate_up: each expert's gate rows and up rows interleaved (2j gate, 2j + 1 up)
        const std::vector<std::int64_t> s13 = io::stacked_shape(t, E, 2 * I, H);
        std::int64_t row = 1;
        for (std::size_t i = 2; i < s13.size(); ++i) row *= s13[i];
        add("gate_up_proj" + std::string(t.stacked), d, s13, [=](index_t e, std::byte* dst) {
          const auto& v = P->get_as<W>(e).*f13;
          const std::size_t bytes = static_cast<std::size_t>(row) * sizeof(v[0]);
          for (index_t j = 0; j < I; ++j) {
            std::memcpy(dst + (2 * j) * bytes, v.data() + j * row, bytes);
            std::memcpy(dst + (2 * j + 1) * bytes, v.data() + (I + j) * row, bytes);
          }
        });
        add("down_proj" + std::string(t.stacked), d, io::stacked_shape(t, E, H, I), [=](index_t e, std::byte* dst) {
          const auto& v = P->get_as<W>(e).*f2;
          std::memcpy(dst, v.data(), v.size() * sizeof(v[0]));
        });
      });
    });
    return;
  }

  // per-expert families: per projection p (gate, up, down) of N rows and K columns
  auto expert = [&](index_t e, const std::string& prefix, index_t inter) {
    const std::array<std::string, 3> proj{names.gate(), names.up(), names.down()};
    for (int p = 0; p < 3; ++p) {
      const index_t rows = p < 2 ? inter : H, cols = p < 2 ? H : inter;
      const std::string base = prefix + proj[static_cast<std::size_t>(p)];
      if (s.is_float()) {
        out.push_back({base + ".weight", fdt, {rows, cols}, [P, e, p, inter, fdt](std::span<std::byte> b) {
                         const auto& w = P->get_as<ExpertWeights>(e);
                         const Matrix m = p == 0 ? Matrix(w.w13.topRows(inter))
                                          : p == 1 ? Matrix(w.w13.bottomRows(inter))
                                                   : w.w2;
                         put_floats(b, m.data(), static_cast<std::size_t>(m.size()), fdt);
                       }});
        continue;
      }
      io::with_layout(s.layout, [&]<class W>(boost::mp11::mp_identity<W>) {
        io::for_each_stored_tensor<W>([&](const auto& t) {
          const std::vector<std::int64_t> shape = io::stored_shape(t, rows, cols);
          // this projection's values in the store's field: gate's, then up's, for w13
          const std::int64_t count = t.scalar ? 1 : shape[0] * shape[1];
          const std::int64_t at = p == 1 && !t.scalar ? count : 0;
          const auto f13 = t.field13, f2 = t.field2;
          out.push_back({base + std::string(t.suffix), io::dtypes_of(t.type).front(), shape,
                         [P, e, p, at, count, f13, f2](std::span<std::byte> b) {
                           const W& w = P->get_as<W>(e);
                           const auto& v = p < 2 ? w.*f13 : w.*f2;
                           put(b, v.data() + at, static_cast<std::size_t>(count) * sizeof(v[0]));
                         }});
        });
      });
    }
  };
  for (index_t e = 0; e < E; ++e) expert(e, names.expert(n, e), I);
  if (c.shared_intermediate > 0) expert(-1, names.shared(n), c.shared_intermediate);
}

}  // namespace polymoe::cli
