#pragma once
// polymoe::io — one MoE layer of a Hugging Face checkpoint (config.json + safetensors).
//
// Families, from config.json `model_type`:
//   mixtral      model.layers.N.block_sparse_moe.{gate.weight, experts.E.{w1,w3,w2}.weight}
//   qwen2_moe    model.layers.N.mlp.{gate.weight, experts.E.{gate,up,down}_proj.weight,
//                shared_expert.{gate,up,down}_proj.weight, shared_expert_gate.weight}
//   qwen3_moe    as qwen2_moe without the shared expert; `num_experts` (Hub) or `num_local_experts`
//                (transformers 5)
//   deepseek_v3  mlp.{gate.weight, gate.e_score_correction_bias, experts.E.*, shared_experts.*}
//   gpt_oss      mlp.{router.weight, router.bias, experts.{gate_up_proj [E,H,2I] (gate/up interleaved
//                in the columns), gate_up_proj_bias, down_proj [E,I,H], down_proj_bias}}
//
// How a layer's experts are stored is read from the tensors themselves (so a checkpoint whose
// layers differ, as gpt_oss_mxfp4 keeps layer 1 in fp32, loads correctly): float weights (F32,
// BF16, F16), or the checkpoint layout of a scheme, declared next to the scheme
// (quant::checkpoint_layout; the list is stored_layouts, <polymoe/io/stored_layouts.hpp>).
// Pre-quantized layers load into the scheme's stored form (BasicMoeWeights<W>), its values
// checked as the layout's elements say, never requantized. Only the chosen layer's tensors are read, and under
// expert parallelism only the local experts' (tensor slices of the memory mapping).
//
//   auto ckpt = polymoe::io::hf_checkpoint::open("Qwen3-30B-A3B");
//   polymoe::io::hf_layer layer = ckpt.load_layer(12);               // cfg + weights variant
//   auto& w = std::get<polymoe::MoeWeights>(layer.weights);           // a float checkpoint
#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>
#include <type_traits>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <polymoe/core/expert_weights.hpp>
#include <polymoe/io/checkpoint_files.hpp>
#include <polymoe/codecs/bf16.hpp>
#include <polymoe/codecs/fp16.hpp>
#include <polymoe/io/stored_layouts.hpp>

namespace polymoe::io {

enum class hf_family { mixtral, qwen2_moe, qwen3_moe, deepseek_v3, gpt_oss };

[[nodiscard]] constexpr std::string_view to_string(hf_family f) noexcept {
  switch (f) {
    case hf_family::mixtral: return "mixtral";
    case hf_family::qwen2_moe: return "qwen2_moe";
    case hf_family::qwen3_moe: return "qwen3_moe";
    case hf_family::deepseek_v3: return "deepseek_v3";
    case hf_family::gpt_oss: return "gpt_oss";
  }
  return "?";
}

/// The family of a config.json `model_type`; polymoe::error listing the known ones.
[[nodiscard]] inline hf_family parse_family(std::string_view model_type) {
  for (const auto f : {hf_family::mixtral, hf_family::qwen2_moe, hf_family::qwen3_moe, hf_family::deepseek_v3,
                       hf_family::gpt_oss})
    if (to_string(f) == model_type) return f;
  throw error(polymoe::detail::concat("config.json: model_type \"", model_type,
                                      "\" is not supported (known: mixtral, qwen2_moe, qwen3_moe, deepseek_v3, gpt_oss)"));
}

/// Tensor names of a family (what the Hub's checkpoints use).
struct hf_names {
  hf_family family;

  [[nodiscard]] std::string layer(index_t n) const { return "model.layers." + std::to_string(n) + "."; }
  [[nodiscard]] std::string moe(index_t n) const {
    return layer(n) + (family == hf_family::mixtral ? "block_sparse_moe." : "mlp.");
  }
  [[nodiscard]] std::string router(index_t n) const {
    return moe(n) + (family == hf_family::gpt_oss ? "router.weight" : "gate.weight");
  }
  [[nodiscard]] std::string router_bias(index_t n) const { return moe(n) + "router.bias"; }
  [[nodiscard]] std::string correction_bias(index_t n) const { return moe(n) + "gate.e_score_correction_bias"; }
  [[nodiscard]] std::string expert(index_t n, index_t e) const { return moe(n) + "experts." + std::to_string(e) + "."; }
  /// Prefix of the shared expert (deepseek_v3: shared_experts., qwen2_moe: shared_expert.).
  [[nodiscard]] std::string shared(index_t n) const {
    return moe(n) + (family == hf_family::deepseek_v3 ? "shared_experts." : "shared_expert.");
  }
  [[nodiscard]] std::string shared_gate(index_t n) const { return moe(n) + "shared_expert_gate.weight"; }
  [[nodiscard]] std::string gate() const { return family == hf_family::mixtral ? "w1" : "gate_proj"; }
  [[nodiscard]] std::string up() const { return family == hf_family::mixtral ? "w3" : "up_proj"; }
  [[nodiscard]] std::string down() const { return family == hf_family::mixtral ? "w2" : "down_proj"; }
  /// gpt_oss stacked tensors: experts.gate_up_proj, experts.down_proj (+ _bias, _blocks, _scales).
  [[nodiscard]] std::string stacked(index_t n, std::string_view what) const {
    return moe(n) + "experts." + std::string(what);
  }
};

/// One layer loaded: its MoeConfig (ep_rank / ep_size set) and its weights, in fp32 or in the
/// stored form of the checkpoint's scheme (only the local experts).
struct hf_layer {
  using weights_variant = stored_layer_weights;
  MoeConfig cfg;
  stored_scheme scheme = stored_scheme::float_weights();
  weights_variant weights;
};

namespace detail {

/// Elements [first, first + count) of a float tensor (F32, BF16, F16) as fp32.
inline std::vector<float> float_slice(const tensor_info& t, std::span<const std::byte> raw, std::int64_t first,
                                      std::int64_t count) {
  std::vector<float> out(static_cast<std::size_t>(count));
  const auto* p = reinterpret_cast<const unsigned char*>(raw.data());
  switch (t.dtype) {
    case dtype::F32:
      if (count) std::memcpy(out.data(), p + first * 4, static_cast<std::size_t>(count) * 4);
      break;
    case dtype::BF16:
    case dtype::F16:
      for (std::int64_t i = 0; i < count; ++i) {
        const std::size_t b = static_cast<std::size_t>(2 * (first + i));
        const auto h = static_cast<std::uint16_t>(p[b] | (p[b + 1] << 8));
        out[static_cast<std::size_t>(i)] = t.dtype == dtype::BF16 ? codecs::bf16_to_float(h) : codecs::fp16_to_float(h);
      }
      break;
    default:
      throw error(polymoe::detail::concat("tensor '", t.name, "' has dtype ", dtype_name(t.dtype),
                                          ", expected a float dtype (F32, BF16, F16)"));
  }
  // Every float tensor of a checkpoint (weights, biases, router, scales) passes here: a NaN or an
  // infinity is named with its tensor and index, before anything computes with it.
  for (std::int64_t i = 0; i < count; ++i)
    if (!std::isfinite(out[static_cast<std::size_t>(i)])) [[unlikely]] {
      std::string at;
      for (std::int64_t flat = first + i, d = static_cast<std::int64_t>(t.shape.size()) - 1; d >= 0; --d) {
        const std::int64_t n = t.shape[static_cast<std::size_t>(d)];
        at = std::to_string(n ? flat % n : 0) + (at.empty() ? "" : ", ") + at;
        flat = n ? flat / n : 0;
      }
      throw error(polymoe::detail::concat("checkpoint: tensor '", t.name, "' [", at, "] = ",
                                          out[static_cast<std::size_t>(i)], " is not finite"));
    }
  return out;
}

inline bool is_float(dtype d) { return d == dtype::F32 || d == dtype::BF16 || d == dtype::F16; }

}  // namespace detail

/// fp32 weights with exactly the values a stored form stands for (Q::dequantize per expert).
template <class Q>
[[nodiscard]] ExpertWeights dequantize_store(const typename Q::weights& w) {
  const ExpertShape s = w.shape();
  ExpertWeights out(s);
  for (index_t e = 0; e < s.experts; ++e) Q::dequantize(w, e, out.w13_of(e), out.w2_of(e));
  if (s.bias) out.b13 = w.b13, out.b2 = w.b2;
  return out;
}

/// A whole layer's stored weights as fp32 MoeWeights (router, gate and biases carried over).
template <class W>
[[nodiscard]] MoeWeights dequantized(const BasicMoeWeights<W>& m) {
  using Q = typename quant::checkpoint_layout<W>::scheme;
  MoeWeights f;
  f.experts = dequantize_store<Q>(m.experts);
  if (m.shared) f.shared = dequantize_store<Q>(*m.shared);
  f.shared_gate = m.shared_gate;
  f.router_weight = m.router_weight;
  f.router_bias = m.router_bias;
  return f;
}

/// Builds `layer` (an empty std::optional of a layer type) from a loaded layer's weights, with the
/// layer's constructor arguments after the weights (dispatcher, kernel): fp32 weights are quantized
/// by the layer's scheme, weights stored in the scheme's own form are taken as stored, any other
/// stored form is dequantized and requantized. Returns how the weights came into the scheme's form
/// (empty for fp32 weights into fp32), for the programs' logs.
template <class Layer, class... Args>
std::string emplace_layer(std::optional<Layer>& layer, const MoeConfig& cfg, stored_layer_weights& weights,
                          Args&&... args) {
  using Q = typename Layer::quant_type;
  return std::visit(
      [&](auto& w) -> std::string {
        using W = std::decay_t<decltype(w)>;
        if constexpr (std::is_same_v<W, MoeWeights>) {
          layer.emplace(cfg, w, std::forward<Args>(args)...);
          return Q::name != "fp32" ? "float weights quantized to " + std::string(Q::name) + " on load" : "";
        } else if constexpr (std::is_same_v<W, BasicMoeWeights<typename Q::weights>>) {
          layer.emplace(cfg, std::move(w), std::forward<Args>(args)...);
          return "pre-quantized weights used as stored (no requantization)";
        } else {
          layer.emplace(cfg, dequantized(w), std::forward<Args>(args)...);
          return "stored " + std::string(quant::checkpoint_layout<std::decay_t<decltype(w.experts)>>::name) +
                 " weights dequantized, then quantized to " + std::string(Q::name);
        }
      },
      weights);
}

/// Reads config.json's fields, with errors naming the field (and the model type where one is
/// required).
struct hf_config_view {
  const json& config;
  hf_family family;

  [[nodiscard]] index_t get_int(std::string_view k) const {
    const json* j = config.find(k);
    require(j != nullptr, "config.json: missing the field '", k, "' (needed for model_type ", to_string(family), ")");
    require(j->is_int() && j->as_int() >= 0, "config.json: field '", k, "' is ", j->type_name(),
            ", expected a non-negative integer");
    return j->as_int();
  }
  [[nodiscard]] index_t get_int_or(std::string_view k, index_t d) const {
    const json* j = config.find(k);
    return (j == nullptr || j->is_null()) ? d : get_int(k);
  }
  [[nodiscard]] double get_double_or(std::string_view k, double d) const {
    const json* j = config.find(k);
    if (j == nullptr || j->is_null()) return d;
    require(j->is_number(), "config.json: field '", k, "' is ", j->type_name(), ", expected a number");
    return j->as_double();
  }
  [[nodiscard]] bool get_bool(std::string_view k, bool d) const {
    const json* j = config.find(k);
    if (j == nullptr || j->is_null()) return d;
    require(j->is_bool(), "config.json: field '", k, "' is ", j->type_name(), ", expected true or false");
    return j->as_bool();
  }
  [[nodiscard]] Activation activation() const {
    const json* j = config.find("hidden_act");
    if (j == nullptr) return Activation::silu_gated;
    require(j->is_string(), "config.json: field 'hidden_act' is ", j->type_name(), ", expected a string");
    const std::string& a = j->as_string();
    if (a == "silu" || a == "swish") return Activation::silu_gated;
    if (a == "gelu") return Activation::gelu_gated;
    throw error("config.json: hidden_act \"" + a + "\" is not supported (silu, gelu)");
  }};

/// A Hugging Face MoE checkpoint directory.
class hf_checkpoint {
 public:
  [[nodiscard]] static hf_checkpoint open(const std::filesystem::path& dir) {
    const auto cfg_path = dir / "config.json";
    std::error_code ec;
    require(std::filesystem::exists(cfg_path, ec), "checkpoint '", dir.string(), "' has no config.json");
    auto [config, fam] = read_config(cfg_path);
    return hf_checkpoint(std::move(config), fam, checkpoint_files::open(dir));
  }

  /// The MoeConfig a config.json alone describes (a file, or a directory holding config.json):
  /// no tensor is read, so the sizes are not checked against weights and a DeepSeek-V3 correction
  /// bias (a tensor) is not set.
  [[nodiscard]] static MoeConfig moe_config_of_json(const std::filesystem::path& path) {
    std::error_code ec;
    const auto file = std::filesystem::is_directory(path, ec) ? path / "config.json" : path;
    require(std::filesystem::is_regular_file(file, ec), "config '", file.string(), "' does not exist");
    auto [config, fam] = read_config(file);
    std::string_view e_key, i_key;
    MoeConfig c = config_fields(hf_config_view{config, fam}, e_key, i_key);
    c.validate();
    return c;
  }

  [[nodiscard]] hf_family family() const noexcept { return names_.family; }
  [[nodiscard]] const hf_names& names() const noexcept { return names_; }
  [[nodiscard]] const json& config() const noexcept { return config_; }
  [[nodiscard]] const checkpoint_files& files() const noexcept { return files_; }
  [[nodiscard]] index_t num_layers() const { return get_int("num_hidden_layers"); }

  /// True when layer n has an MoE block (its router tensor is present).
  [[nodiscard]] bool is_moe_layer(index_t n) const { return files_.contains(names_.router(n)); }

  /// How layer n's routed experts are stored (read from the tensor names and dtypes).
  [[nodiscard]] stored_scheme scheme_of(index_t n) const {
    check_layer(n);
    if (family() == hf_family::gpt_oss) {
      // The stacked form of a layout: its first tensor under the stacked name.
      std::string names = polymoe::detail::concat("'", names_.stacked(n, "gate_up_proj"), "'");
      stored_scheme found = stored_scheme::float_weights();
      boost::mp11::mp_for_each<boost::mp11::mp_iota_c<stored_layout_count>>([&](auto I) {
        using W = boost::mp11::mp_at_c<stored_layouts, I>;
        const auto& first = std::get<0>(quant::checkpoint_layout<W>::tensors);
        if (first.stacked.empty()) return;
        const std::string name = names_.stacked(n, "gate_up_proj" + std::string(first.stacked));
        if (files_.contains(name)) found = stored_scheme{static_cast<int>(I)};
        names += polymoe::detail::concat(" or '", name, "'");
      });
      if (!found.is_float()) return found;
      require(files_.contains(names_.stacked(n, "gate_up_proj")), "checkpoint: layer ", n, " has none of ", names);
      return found;
    }
    return scheme_at(names_.expert(n, 0));
  }
  /// The dtype of layer n's routed float expert weights as stored (F32, BF16 or F16; ask only where
  /// scheme_of(n) is float weights).
  [[nodiscard]] dtype stored_dtype_of(index_t n) const {
    check_layer(n);
    if (family() == hf_family::gpt_oss && files_.contains(names_.stacked(n, "gate_up_proj")))
      return files_.info(names_.stacked(n, "gate_up_proj")).dtype;
    return files_.info(names_.expert(n, 0) + names_.gate() + ".weight").dtype;
  }

  /// Layer n's MoeConfig (global: ep_size 1), from config.json and the router's tensors.
  [[nodiscard]] MoeConfig moe_config(index_t n) const {
    check_layer(n);
    std::string_view e_key, i_key;  // the config keys the sizes came from, for check_sizes' errors
    MoeConfig c = config_fields(config_view(), e_key, i_key);
    check_sizes(n, c, e_key, i_key);
    if (family() == hf_family::deepseek_v3 && files_.contains(names_.correction_bias(n))) {
      const auto& t = expect_shape(names_.correction_bias(n), {c.num_experts});
      const auto v = detail::float_slice(t, files_.bytes(t.name), 0, c.num_experts);
      c.router.correction_bias = Eigen::Map<const Vector>(v.data(), c.num_experts);
    }
    c.validate();
    return c;
  }

  /// The layers below num_hidden_layers that the files hold tensors of, ascending: bounded by the
  /// files, whatever config.json says (a num_hidden_layers of 2^40 is not a loop of 2^40).
  [[nodiscard]] std::vector<index_t> layers_in_files() const {
    const index_t L = num_layers();
    std::vector<index_t> out;
    const std::string_view prefix = "model.layers.";
    for (const auto& name : files_.names_with_prefix(prefix)) {
      index_t v = 0;
      std::size_t i = prefix.size(), digits = 0;
      for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && digits < 18; ++i, ++digits) v = v * 10 + (name[i] - '0');
      if (digits == 0 || digits == 18 || i >= name.size() || name[i] != '.' || v >= L) continue;
      out.push_back(v);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  /// The MoE layers among layers_in_files(), ascending.
  [[nodiscard]] std::vector<index_t> moe_layers() const {
    std::vector<index_t> out;
    for (const index_t n : layers_in_files())
      if (is_moe_layer(n)) out.push_back(n);
    return out;
  }

  /// Routed experts [first, first + count) of layer n in fp32 (dequantized when stored quantized).
  [[nodiscard]] ExpertWeights load_fp32_experts(index_t n, index_t first, index_t count) const {
    const MoeConfig c = moe_config(n);
    return to_fp32(load_routed(n, c, first, count, scheme_of(n)));
  }
  /// Layer n's shared expert in fp32, or nullopt when it has none.
  [[nodiscard]] std::optional<ExpertWeights> load_fp32_shared(index_t n) const {
    const MoeConfig c = moe_config(n);
    if (c.shared_intermediate == 0) return std::nullopt;
    const ExpertShape s{1, c.hidden, c.shared_intermediate, is_gated(c.activation), false};
    const stored_scheme sc = scheme_at(names_.shared(n));
    return to_fp32(load_per_expert(s, sc, [&](index_t) { return names_.shared(n); }));
  }

  /// Layer n for rank ep_rank of ep_size: config, router, the local routed experts and the shared
  /// expert, in fp32 for float checkpoints and in the stored scheme's form for quantized ones.
  [[nodiscard]] hf_layer load_layer(index_t n, int ep_rank = 0, int ep_size = 1) const {
    hf_layer L;
    L.cfg = moe_config(n);
    L.cfg.ep_rank = ep_rank;
    L.cfg.ep_size = ep_size;
    L.cfg.validate();
    L.scheme = scheme_of(n);
    const MoeConfig& c = L.cfg;
    const index_t first = c.first_local_expert(), count = c.local_experts();
    stored routed = load_routed(n, c, first, count, L.scheme);
    std::optional<stored> shared;
    if (c.shared_intermediate > 0) {
      const ExpertShape s{1, c.hidden, c.shared_intermediate, is_gated(c.activation), false};
      const stored_scheme sc = scheme_at(names_.shared(n));
      shared = load_per_expert(s, sc, [&](index_t) { return names_.shared(n); });
      if (sc != L.scheme) shared = requantize(to_fp32(*shared), L.scheme);  // keep one store type
    }
    std::visit(
        [&](auto& w) {
          using W = std::decay_t<decltype(w)>;
          BasicMoeWeights<W> m;
          m.experts = std::move(w);
          if (shared) m.shared = std::move(std::get<W>(*shared));
          load_router(n, c, m);
          L.weights = std::move(m);
        },
        routed);
    return L;
  }

 private:
  using stored = stored_experts;

  hf_checkpoint(json config, hf_family fam, checkpoint_files files)
      : config_(std::move(config)), names_{fam}, files_(std::move(files)) {}

  // ---- config fields ----
  [[nodiscard]] hf_config_view config_view() const noexcept { return {config_, family()}; }
  [[nodiscard]] index_t get_int(std::string_view k) const { return config_view().get_int(k); }
  [[nodiscard]] index_t get_int_or(std::string_view k, index_t d) const { return config_view().get_int_or(k, d); }
  [[nodiscard]] double get_double_or(std::string_view k, double d) const { return config_view().get_double_or(k, d); }
  [[nodiscard]] bool get_bool(std::string_view k, bool d) const { return config_view().get_bool(k, d); }
  [[nodiscard]] Activation activation() const { return config_view().activation(); }


  void check_layer(index_t n) const {
    const index_t L = num_layers();
    require(n >= 0 && n < L, "checkpoint: layer ", n, " is out of range [0, num_hidden_layers=", L, ")");
    if (!is_moe_layer(n)) {
      require(!files_.names_with_prefix(names_.layer(n)).empty() || files_.names_with_prefix("model.layers.").empty(),
              "checkpoint: layer ", n, " has no tensors in this checkpoint");
      throw error(polymoe::detail::concat("checkpoint: layer ", n, " is not an MoE layer (missing tensor '",
                                          names_.router(n), "')"));
    }
  }

  /// The MoeConfig fields config.json gives (e_key and i_key: the keys the sizes came from).
  [[nodiscard]] static MoeConfig config_fields(const hf_config_view& v, std::string_view& e_key,
                                               std::string_view& i_key) {
    MoeConfig c;
    c.hidden = v.get_int("hidden_size");
    c.router.top_k = v.get_int("num_experts_per_tok");
    switch (v.family) {
      case hf_family::mixtral:
        c.num_experts = v.get_int(e_key = "num_local_experts");
        c.intermediate = v.get_int(i_key = "intermediate_size");
        c.router.renormalize = true;
        c.activation = v.activation();
        break;
      case hf_family::qwen2_moe:
      case hf_family::qwen3_moe:
        c.num_experts = v.get_int(e_key = v.config.contains("num_experts") ? "num_experts" : "num_local_experts");
        c.intermediate = v.get_int(i_key = "moe_intermediate_size");
        c.router.renormalize = v.get_bool("norm_topk_prob", false);
        c.activation = v.activation();
        if (v.family == hf_family::qwen2_moe && v.get_int_or("shared_expert_intermediate_size", 0) > 0) {
          c.shared_intermediate = v.get_int("shared_expert_intermediate_size");
          c.shared_expert_gate = true;
        }
        break;
      case hf_family::deepseek_v3: {
        c.num_experts = v.get_int(e_key = "n_routed_experts");
        c.intermediate = v.get_int(i_key = "moe_intermediate_size");
        c.activation = v.activation();
        if (const json* sf = v.config.find("scoring_func"))
          require(sf->is_string() && sf->as_string() == "sigmoid", "config.json: scoring_func must be \"sigmoid\" for ",
                  "deepseek_v3 (grouped sigmoid routing)");
        c.router.method = RoutingMethod::sigmoid_grouped_topk;
        c.router.renormalize = v.get_bool("norm_topk_prob", true);
        c.router.n_group = v.get_int_or("n_group", 1);
        c.router.topk_group = v.get_int_or("topk_group", 1);
        c.router.routed_scaling_factor = static_cast<float>(v.get_double_or("routed_scaling_factor", 1.0));
        c.shared_intermediate = shared_rows(v.get_int_or("n_shared_experts", 0), c.intermediate);
        break;
      }
      case hf_family::gpt_oss:
        c.num_experts = v.get_int(e_key = v.config.contains("num_local_experts") ? "num_local_experts" : "num_experts");
        c.intermediate = v.get_int(i_key = "intermediate_size");
        c.router.method = RoutingMethod::topk_softmax;
        c.activation = Activation::swiglu_oai;
        c.expert_bias = true;
        c.swiglu_limit = static_cast<float>(v.get_double_or("swiglu_limit", 7.0));
        break;
    }
    return c;
  }
  /// config.json's object and model family.
  [[nodiscard]] static std::pair<json, hf_family> read_config(const std::filesystem::path& cfg_path) {
    json config = read_json_file(cfg_path);
    require(config.is_object(), cfg_path.string(), ": expected a JSON object");
    const json* mt = config.find("model_type");
    require(mt != nullptr && mt->is_string(), cfg_path.string(), ": missing the string field 'model_type'");
    const hf_family fam = parse_family(mt->as_string());
    return {std::move(config), fam};
  }

  /// config.json's sizes against the layer's tensors: the router [E, H], the first and last expert's
  /// gate projection (or GPT-OSS's stacked gate_up) [.., I, ..], the shared expert's rows.
  void check_sizes(index_t n, const MoeConfig& c, std::string_view e_key, std::string_view i_key) const {
    const tensor_info& r = files_.info(names_.router(n));
    require(r.shape == std::vector<std::int64_t>{c.num_experts, c.hidden}, "config.json: ", e_key, "=", c.num_experts,
            " and hidden_size=", c.hidden, " disagree with tensor '", r.name, "' of shape ", r.shape_string(),
            " ([num_experts, hidden_size])");
    const auto rows_are = [&](const std::string& name, std::size_t dim, index_t want, std::string_view key) {
      require(files_.contains(name), "config.json: ", key, "=", want, " but the checkpoint has no tensor '", name, "'");
      const tensor_info& t = files_.info(name);
      require(t.rank() > dim && t.shape[dim] == want, "config.json: ", key, "=", want, " disagrees with tensor '", name,
              "' of shape ", t.shape_string());
    };
    if (family() == hf_family::gpt_oss) {
      const std::string blocks = names_.stacked(n, "gate_up_proj_blocks");
      if (files_.contains(blocks)) {
        rows_are(blocks, 0, c.num_experts, e_key);
        rows_are(blocks, 1, 2 * c.intermediate, i_key);  // [E, 2I, H/32, 16]
      } else {
        rows_are(names_.stacked(n, "gate_up_proj"), 0, c.num_experts, e_key);
        rows_are(names_.stacked(n, "gate_up_proj"), 2, 2 * c.intermediate, i_key);  // [E, H, 2I]
      }
      return;
    }
    if (c.num_experts <= 0) return;  // MoeConfig::validate names it
    rows_are(names_.expert(n, 0) + names_.gate() + ".weight", 0, c.intermediate, i_key);
    rows_are(names_.expert(n, c.num_experts - 1) + names_.gate() + ".weight", 0, c.intermediate, i_key);
    if (c.shared_intermediate > 0)
      rows_are(names_.shared(n) + names_.gate() + ".weight", 0, c.shared_intermediate,
               family() == hf_family::deepseek_v3 ? "n_shared_experts * moe_intermediate_size"
                                                  : "shared_expert_intermediate_size");
  }
  /// DeepSeek-V3's shared expert rows, n_shared_experts · I, without overflow (checked against the
  /// tensor by check_sizes).
  [[nodiscard]] static index_t shared_rows(index_t n_shared, index_t inter) {
    require(n_shared <= (index_t{1} << 20) && inter <= (index_t{1} << 40), "config.json: n_shared_experts=", n_shared,
            " with moe_intermediate_size=", inter, " is out of range");
    return n_shared * inter;
  }

  /// The tensor's info after checking its shape; polymoe::error naming it otherwise.
  const tensor_info& expect_shape(const std::string& name, std::vector<std::int64_t> want) const {
    const tensor_info& t = files_.info(name);
    require(t.shape == want, "checkpoint: tensor '", name, "' has shape ", t.shape_string(), ", expected ",
            detail::shape_string(want));
    return t;
  }
  const tensor_info& expect(const std::string& name, std::vector<std::int64_t> want, const std::vector<dtype>& ok) const {
    return expect_dtype(expect_shape(name, std::move(want)), ok);
  }
  /// A tensor holding one value (shape [] or [1]) of one of the dtypes `ok`.
  const tensor_info& expect_one_value(const std::string& name, const std::vector<dtype>& ok) const {
    const tensor_info& t = files_.info(name);
    require(t.numel() == 1, "checkpoint: tensor '", name, "' has shape ", t.shape_string(), ", expected a scalar");
    return expect_dtype(t, ok);
  }
  const tensor_info& expect_dtype(const tensor_info& t, const std::vector<dtype>& ok) const {
    const std::string& name = t.name;
    bool good = false;
    std::string names;
    for (const dtype d : ok) {
      good |= t.dtype == d;
      if (!names.empty()) names += " or ";
      names += dtype_name(d);
    }
    require(good, "checkpoint: tensor '", name, "' has dtype ", dtype_name(t.dtype), ", expected ", names);
    return t;
  }

  /// The stored form of the expert at `prefix`: the layout whose tensors for its gate projection
  /// are all there with dtypes it takes (of several, the one with the most: NVFP4's hold MXFP4's),
  /// else float weights, when the weight has a float dtype and no other tensor beside it.
  [[nodiscard]] stored_scheme scheme_at(const std::string& prefix) const {
    const std::string w = prefix + names_.gate();
    const tensor_info& t = files_.info(w + ".weight");
    stored_scheme best = stored_scheme::float_weights();
    std::size_t most = 0;
    bool extra = false;  // a tensor of some layout beside the weight
    boost::mp11::mp_for_each<boost::mp11::mp_iota_c<stored_layout_count>>([&](auto I) {
      using W = boost::mp11::mp_at_c<stored_layouts, I>;
      std::size_t n = 0;
      bool all = true;
      for_each_stored_tensor<W>([&](const auto& st) {
        const std::string name = w + std::string(st.suffix);
        const bool there = files_.contains(name);
        extra |= there && st.suffix != ".weight";
        const auto ok = dtypes_of(st.type);
        all = all && there && std::find(ok.begin(), ok.end(), files_.info(name).dtype) != ok.end();
        ++n;
      });
      if (all && n > most) best = stored_scheme{static_cast<int>(I)}, most = n;
    });
    if (!best.is_float()) return best;
    require(detail::is_float(t.dtype) && !extra, "checkpoint: '", w, ".weight' (", dtype_name(t.dtype),
            ") and the tensors beside it are none of the stored forms polymoe reads: ", stored_forms_text());
    return best;
  }

  /// Elements [first, first + count) of a stored tensor appended to `out` (float tensors as fp32,
  /// codes as their bytes).
  template <class T>
  void append_values(const tensor_info& t, std::int64_t first, std::int64_t count, std::vector<T>& out) const {
    if constexpr (std::is_same_v<T, float>) {
      const auto v = detail::float_slice(t, files_.bytes(t.name), first, count);
      out.insert(out.end(), v.begin(), v.end());
    } else {
      static_assert(sizeof(T) == 1, "a stored code is a byte");
      const auto raw = files_.bytes(t.name);
      const auto* p = reinterpret_cast<const T*>(raw.data());
      out.insert(out.end(), p + first, p + first + count);
    }
  }

  /// Routed experts [first, first + count).
  [[nodiscard]] stored load_routed(index_t n, const MoeConfig& c, index_t first, index_t count, stored_scheme sc) const {
    const ExpertShape s{count, c.hidden, c.intermediate, is_gated(c.activation), c.expert_bias};
    if (family() == hf_family::gpt_oss) return load_gpt_oss(n, c, s, first, sc);
    return load_per_expert(s, sc, [&](index_t e) { return names_.expert(n, first + e); });
  }

  /// Per-expert tensors (prefix(e) + {gate, up, down} + ".weight" and their scales).
  template <class PrefixOf>
  [[nodiscard]] stored load_per_expert(const ExpertShape& s, stored_scheme sc, PrefixOf prefix_of) const {
    const index_t E = s.experts, H = s.hidden, I = s.intermediate;
    require(s.gated, "checkpoint: non-gated experts are not supported by the Hugging Face loader");
    const std::string g = names_.gate(), u = names_.up(), d = names_.down();
    if (sc.is_float()) {
      ExpertWeights w(s);
      for (index_t e = 0; e < E; ++e) {
        const std::string p = prefix_of(e);
        auto load = [&](const std::string& proj, index_t rows, index_t cols, auto dst) {
          const auto& t = expect(p + proj + ".weight", {rows, cols}, {dtype::F32, dtype::BF16, dtype::F16});
          const auto v = detail::float_slice(t, files_.bytes(t.name), 0, rows * cols);
          dst = Eigen::Map<const Matrix>(v.data(), rows, cols);
        };
        load(g, I, H, w.w13_of(e).topRows(I));
        load(u, I, H, w.w13_of(e).bottomRows(I));
        load(d, H, I, w.w2_of(e));
      }
      return w;
    }
    return with_layout(sc, [&]<class W>(boost::mp11::mp_identity<W>) -> stored {
      W w{};
      w.shape_ = s;
      const std::string proj[3] = {g, u, d};
      for (index_t e = 0; e < E; ++e) {
        const std::string p = prefix_of(e);
        for_each_stored_tensor<W>([&](const auto& t) {
          for (int j = 0; j < 3; ++j) {
            const index_t N = j < 2 ? I : H, K = j < 2 ? H : I;
            const std::string name = p + proj[j] + std::string(t.suffix);
            // a scalar is one value, stored as [] or [1]
            const tensor_info& ti = t.scalar ? expect_one_value(name, dtypes_of(t.type))
                                             : expect(name, stored_shape(t, N, K), dtypes_of(t.type));
            auto& field = j < 2 ? w.*(t.field13) : w.*(t.field2);
            const std::size_t at = field.size();
            append_values(ti, 0, ti.numel(), field);
            quant::detail::require_elements(t.type, std::span(field).subspan(at), "checkpoint", "tensor '" + name + "'");
            if (t.scalar && j == 1) {  // gate and up share one: up's must be gate's
              require(field[at] == field[at - 1], "checkpoint: '", p + g + std::string(t.suffix), "' (", field[at - 1],
                      ") and '", name, "' (", field[at], ") differ; polymoe's ", quant::checkpoint_layout<W>::name,
                      " needs one for the fused gate/up projection");
              field.pop_back();
            }
          }
        });
      }
      w.validate("checkpoint");
      return w;
    });
  }

  /// gpt_oss: stacked tensors, experts [first, first + s.experts).
  [[nodiscard]] stored load_gpt_oss(index_t n, const MoeConfig& c, const ExpertShape& s, index_t first,
                                    stored_scheme sc) const {
    const index_t E = c.num_experts, El = s.experts, H = s.hidden, I = s.intermediate;
    const auto bias = [&](const std::string& what, index_t cols) {
      const auto& t = expect(names_.stacked(n, what), {E, cols}, {dtype::F32, dtype::BF16, dtype::F16});
      const auto v = detail::float_slice(t, files_.bytes(t.name), first * cols, El * cols);
      return Matrix(Eigen::Map<const Matrix>(v.data(), El, cols));
    };
    Matrix b13 = bias("gate_up_proj_bias", 2 * I), b2 = bias("down_proj_bias", H);
    if (!sc.is_float())
      return with_layout(sc, [&]<class W>(boost::mp11::mp_identity<W>) -> stored {
        W w{};
        w.shape_ = s;
        w.b2 = std::move(b2);
        w.b13 = Matrix(El, 2 * I);
        for (index_t e = 0; e < El; ++e) w.b13.row(e) = deinterleave_bias(b13.row(e));
        for_each_stored_tensor<W>([&](const auto& t) {
          require(!t.stacked.empty() && !t.scalar, "checkpoint: gpt_oss stores its experts stacked, which the ",
                  quant::checkpoint_layout<W>::name, " layout has no form for");
          for (const int j : {0, 1}) {  // gate_up (rows interleaved: 2j gate, 2j + 1 up), down
            const index_t N = j == 0 ? 2 * I : H, K = j == 0 ? H : I;
            const std::string name =
                names_.stacked(n, std::string(j == 0 ? "gate_up_proj" : "down_proj") + std::string(t.stacked));
            const tensor_info& ti = expect(name, stacked_shape(t, E, N, K), dtypes_of(t.type));
            const std::int64_t per = E ? ti.numel() / E : 0;
            auto& field = j == 0 ? w.*(t.field13) : w.*(t.field2);
            append_values(ti, first * per, El * per, field);
            quant::detail::require_elements(t.type, std::span(field), "checkpoint", "tensor '" + name + "'");
            // Whole stored rows move, so the values are those of dequantize-then-deinterleave.
            if (j == 0) polymoe::quantize::deinterleave_rows(field, El, N, per / N);
          }
        });
        w.validate("checkpoint");
        return w;
      });
    const auto& tgu = expect(names_.stacked(n, "gate_up_proj"), {E, H, 2 * I}, {dtype::F32, dtype::BF16, dtype::F16});
    const auto& td = expect(names_.stacked(n, "down_proj"), {E, I, H}, {dtype::F32, dtype::BF16, dtype::F16});
    const auto gu = detail::float_slice(tgu, files_.bytes(tgu.name), first * H * 2 * I, El * H * 2 * I);
    const auto dn = detail::float_slice(td, files_.bytes(td.name), first * I * H, El * I * H);
    ExpertWeights w(s);
    for (index_t e = 0; e < El; ++e) {
      w.w13_of(e) = deinterleave_gate_up(Eigen::Map<const Matrix>(gu.data() + e * H * 2 * I, H, 2 * I));
      w.w2_of(e) = Eigen::Map<const Matrix>(dn.data() + e * I * H, I, H).transpose();
      w.b13.row(e) = deinterleave_bias(b13.row(e));
    }
    w.b2 = std::move(b2);
    return w;
  }

  /// Dequantizes any stored form to fp32 (exact values the scheme stands for).
  [[nodiscard]] static ExpertWeights to_fp32(stored st) {
    return std::visit(
        [](auto& w) -> ExpertWeights {
          using W = std::decay_t<decltype(w)>;
          if constexpr (std::is_same_v<W, ExpertWeights>)
            return std::move(w);
          else
            return dequantize_store<typename quant::checkpoint_layout<W>::scheme>(w);
        },
        st);
  }
  [[nodiscard]] static stored requantize(const ExpertWeights& w, stored_scheme sc) {
    if (sc.is_float()) return w;
    return with_layout(sc, [&]<class W>(boost::mp11::mp_identity<W>) -> stored {
      return quant::checkpoint_layout<W>::scheme::quantize(w);
    });
  }

  template <class W>
  void load_router(index_t n, const MoeConfig& c, BasicMoeWeights<W>& m) const {
    const auto& t = expect(names_.router(n), {c.num_experts, c.hidden}, {dtype::F32, dtype::BF16, dtype::F16});
    const auto v = detail::float_slice(t, files_.bytes(t.name), 0, c.num_experts * c.hidden);
    m.router_weight = Eigen::Map<const Matrix>(v.data(), c.num_experts, c.hidden);
    if (family() == hf_family::gpt_oss) {
      const auto& tb = expect(names_.router_bias(n), {c.num_experts}, {dtype::F32, dtype::BF16, dtype::F16});
      const auto b = detail::float_slice(tb, files_.bytes(tb.name), 0, c.num_experts);
      m.router_bias = Eigen::Map<const Vector>(b.data(), c.num_experts);
    }
    if (c.shared_expert_gate) {
      const auto& tg = expect(names_.shared_gate(n), {1, c.hidden}, {dtype::F32, dtype::BF16, dtype::F16});
      const auto g = detail::float_slice(tg, files_.bytes(tg.name), 0, c.hidden);
      m.shared_gate = Eigen::Map<const Matrix>(g.data(), 1, c.hidden);
    }
  }

  json config_;
  hf_names names_;
  checkpoint_files files_;
};

}  // namespace polymoe::io
