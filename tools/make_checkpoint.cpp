// `polymoe make-checkpoint`: a synthetic checkpoint in Hugging Face layout with real shapes.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli.hpp"
#include "layout.hpp"
#include "progress.hpp"

namespace polymoe::cli {
namespace {

using preset = io::model_preset;

/// Counter-based random numbers: the value of (seed, stream, i) never depends on the order of
/// generation, so tensors can be produced one at a time.
struct rng {
  std::uint64_t state;
  static std::uint64_t mix(std::uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  rng(std::uint64_t seed, std::uint64_t a, std::uint64_t b) : state(mix(mix(mix(seed) ^ a) ^ (b * 0x9E37ull))) {}
  /// uniform in [-1, 1)
  float next() {
    state = mix(state);
    return static_cast<float>(static_cast<double>(state >> 40) * (1.0 / 8388608.0) - 1.0);
  }
  void fill(float* p, std::size_t n, float scale) {
    for (std::size_t i = 0; i < n; ++i) p[i] = next() * scale;
  }
};

io::json make_config(const preset& p, index_t layers) {
  using io::json;
  json c = json::object();
  const std::string arch = p.family == io::hf_family::mixtral       ? "MixtralForCausalLM"
                           : p.family == io::hf_family::qwen2_moe   ? "Qwen2MoeForCausalLM"
                           : p.family == io::hf_family::qwen3_moe   ? "Qwen3MoeForCausalLM"
                           : p.family == io::hf_family::deepseek_v3 ? "DeepseekV3ForCausalLM"
                                                                    : "GptOssForCausalLM";
  c.set("architectures", json::array({json(arch)}));
  c.set("model_type", std::string(io::to_string(p.family)));
  c.set("hidden_size", p.hidden);
  c.set("num_hidden_layers", layers);
  c.set("num_experts_per_tok", p.top_k);
  c.set("hidden_act", "silu");
  const out_scheme stored = parse_out_scheme(p.stored, true);
  c.set("torch_dtype", stored.is_float() && stored.float_dtype == io::dtype::F32 ? "float32" : "bfloat16");
  c.set("polymoe_synthetic", json("random weights written by polymoe make-checkpoint --preset " + std::string(p.name)));
  switch (p.family) {
    case io::hf_family::mixtral:
      c.set("num_local_experts", p.experts), c.set("intermediate_size", p.intermediate);
      break;
    case io::hf_family::qwen2_moe:
    case io::hf_family::qwen3_moe:
      c.set("num_experts", p.experts), c.set("moe_intermediate_size", p.intermediate);
      c.set("norm_topk_prob", p.family == io::hf_family::qwen3_moe);
      c.set("decoder_sparse_step", 1), c.set("mlp_only_layers", json::array());
      if (p.family == io::hf_family::qwen2_moe) c.set("shared_expert_intermediate_size", p.shared);
      break;
    case io::hf_family::deepseek_v3:
      c.set("n_routed_experts", p.experts), c.set("moe_intermediate_size", p.intermediate);
      c.set("n_shared_experts", p.shared), c.set("n_group", p.n_group), c.set("topk_group", p.topk_group);
      c.set("routed_scaling_factor", p.scaling), c.set("norm_topk_prob", true), c.set("scoring_func", "sigmoid");
      c.set("topk_method", "noaux_tc");
      c.set("first_k_dense_replace", 0);  // every synthetic layer is an MoE layer (the real model: 3)
      break;
    case io::hf_family::gpt_oss:
      c.set("num_local_experts", p.experts), c.set("intermediate_size", p.intermediate), c.set("swiglu_limit", 7.0);
      break;
  }
  if (!stored.is_float()) c.set("quantization_config", quantization_config(stored, p.family));
  return c;
}

}  // namespace

namespace {

/// `polymoe make-checkpoint`'s settings, as the command line gives them.
struct make_checkpoint_settings {
  std::string preset, out;
  std::int64_t layers = 0, tokens = 16, shard_mb = 4096;
  std::uint64_t seed = 0;
  progress_flags shown;
  const CLI::Option* layers_given = nullptr;
};

int make_checkpoint_command(const make_checkpoint_settings& a);

}  // namespace

command add_make_checkpoint(CLI::App& polymoe) {
  CLI::App* app = polymoe.add_subcommand(
      "make-checkpoint", "write a synthetic checkpoint in Hugging Face layout (tiny, mixtral-8x7b, ...)");
  auto s = std::make_shared<make_checkpoint_settings>();
  std::vector<std::string> presets;
  std::string listed;
  for (const auto& p : io::model_presets) {
    presets.emplace_back(p.name);
    listed += "  " + std::string(p.name) + std::string(p.name.size() < 18 ? 18 - p.name.size() : 1, ' ') +
              std::string(p.about) + "\n";
  }
  app->add_option("--preset", s->preset, "the model whose shapes the checkpoint has (below)")
      ->type_name("NAME")
      ->required()
      ->check(programs::choice(std::move(presets)));
  app->add_option("--out", s->out, "the checkpoint's directory")->type_name("DIR")->required();
  // Real models have at most a few hundred layers; more is a typo that would write for hours.
  s->layers_given = app->add_option("--layers", s->layers, "MoE layers (default: the preset's)")
                        ->type_name("N")
                        ->check(CLI::Range(std::int64_t{1}, std::int64_t{4096}));
  app->add_option("--seed", s->seed, "the random weights' seed (default 0)")->type_name("S");
  app->add_option("--tokens", s->tokens, "tokens of DIR/input.safetensors (default 16; 0: none)")
      ->type_name("T")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 24));
  app->add_option("--shard-mb", s->shard_mb, "output larger than this is sharded (default 4096)")
      ->type_name("MB")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  s->shown.add_to(*app);
  app->footer("Writes a synthetic checkpoint in Hugging Face layout (config.json + safetensors, sharded with\n"
              "model.safetensors.index.json above --shard-mb, default 4096) with the shapes of a real model\n"
              "and seeded random weights: only the MoE tensors (router, experts, shared experts) of each\n"
              "layer. Also writes DIR/input.safetensors with hidden_states [T, H] (--tokens, default 16).\n"
              "Tensors are generated and written one at a time; a write longer than a second shows its\n"
              "progress on stderr (--progress: from the start; --quiet: no progress and no summary). Presets:\n" +
              listed);
  return {app, [s] { return make_checkpoint_command(*s); }};
}

namespace {

int make_checkpoint_command(const make_checkpoint_settings& a) {
  const std::string &name = a.preset, &out_dir = a.out;
  const preset* p = io::find_model_preset(name);
  require(p != nullptr, "make-checkpoint: unknown --preset '", name, "' (valid: ", io::model_preset_names(), ")");
  const index_t layers = a.layers_given->count() > 0 ? a.layers : p->layers, tokens = a.tokens;
  const std::uint64_t seed = a.seed;
  const std::uint64_t shard = static_cast<std::uint64_t>(a.shard_mb) << 20;

  MoeConfig c;
  c.hidden = p->hidden, c.intermediate = p->intermediate, c.num_experts = p->experts, c.router.top_k = p->top_k;
  c.shared_intermediate = p->family == io::hf_family::deepseek_v3 ? p->shared * p->intermediate
                          : p->family == io::hf_family::qwen2_moe ? p->shared
                                                                  : 0;
  const bool gpt = p->family == io::hf_family::gpt_oss;
  const io::hf_names names{p->family};
  const index_t H = p->hidden;
  std::vector<io::tensor_source> out;
  const out_scheme stored = parse_out_scheme(p->stored, true);
  const io::dtype fdt = stored.is_float() ? stored.float_dtype : io::dtype::F32;
  auto random_tensor = [&](std::string tname, std::vector<std::int64_t> shape, io::dtype d, std::uint64_t stream,
                           float scale) {
    out.push_back({std::move(tname), d, shape, [=](std::span<std::byte> b) {
                     std::size_t n = 1;
                     for (const auto s : shape) n *= static_cast<std::size_t>(s);
                     std::vector<float> v(n);
                     rng(seed, stream, 0).fill(v.data(), n, scale);
                     layout_detail::put_floats(b, v.data(), n, d);
                   }});
  };
  for (index_t n = 0; n < layers; ++n) {
    const std::uint64_t L = static_cast<std::uint64_t>(n) << 32;
    random_tensor(names.router(n), {p->experts, H}, gpt || !stored.is_float() ? io::dtype::F32 : fdt,
                  L | 0xFFFF0001u, std::sqrt(3.0f / static_cast<float>(H)));
    if (gpt) random_tensor(names.router_bias(n), {p->experts}, io::dtype::F32, L | 0xFFFF0002u, 0.1f);
    if (p->family == io::hf_family::deepseek_v3)
      random_tensor(names.correction_bias(n), {p->experts}, io::dtype::F32, L | 0xFFFF0003u, 0.05f);
    if (p->family == io::hf_family::qwen2_moe)
      random_tensor(names.shared_gate(n), {1, H}, fdt, L | 0xFFFF0004u, std::sqrt(3.0f / static_cast<float>(H)));
    auto expert = [=](index_t e, index_t inter) {
      ExpertWeights w(ExpertShape{1, H, inter, true, gpt});
      rng r(seed, L | static_cast<std::uint32_t>(e), 1);
      r.fill(w.w13.data(), static_cast<std::size_t>(w.w13.size()), std::sqrt(3.0f / static_cast<float>(H)));
      r.fill(w.w2.data(), static_cast<std::size_t>(w.w2.size()), std::sqrt(3.0f / static_cast<float>(inter)));
      if (gpt) {
        r.fill(w.b13.data(), static_cast<std::size_t>(w.b13.size()), 0.05f);
        r.fill(w.b2.data(), static_cast<std::size_t>(w.b2.size()), 0.05f);
      }
      return w;
    };
    const index_t I = p->intermediate, SI = c.shared_intermediate;
    auto P = std::make_shared<expert_provider>(
        stored, [=](index_t e) { return expert(e, I); }, [=]() { return expert(0xFFFFFF, SI); });
    add_expert_tensors(out, names, n, c, std::move(P));
  }
  std::uint64_t total = 0;
  for (const auto& t : out) total += t.nbytes();
  const bool quiet = a.shown.quiet;
  if (!quiet)
    std::printf("polymoe make-checkpoint: preset %s (%s), %lld layer%s, %zu tensors, %.3f GB -> %s\n",
                std::string(p->name).c_str(), std::string(p->about).c_str(), static_cast<long long>(layers),
                layers == 1 ? "" : "s", out.size(), static_cast<double>(total) / 1e9, out_dir.c_str());
  std::fflush(stdout);
  if (total > (1ull << 30))
    std::fprintf(stderr, "polymoe make-checkpoint: warning: this writes %.1f GB (generated and written one tensor at a "
                         "time; needs that much free disk)\n", static_cast<double>(total) / 1e9);
  std::fflush(stdout);
  const auto files = [&] {
    progress p(a.shown.mode(), "make-checkpoint: writing " + out_dir, total);
    return io::write_checkpoint(out_dir, std::move(out), shard, [&](std::uint64_t done) { p.set(done); });
  }();
  io::write_text_file(std::filesystem::path(out_dir) / "config.json", make_config(*p, layers).dump());
  if (tokens > 0) {
    std::vector<float> x(static_cast<std::size_t>(tokens * H));
    rng(seed, 0xABCDEFull, 7).fill(x.data(), x.size(), 1.7320508f);
    io::save_safetensors(std::filesystem::path(out_dir) / "input.safetensors",
                         {io::tensor_view<float>("hidden_states", {tokens, H}, std::span<const float>(x))});
  }
  if (!quiet)
    std::printf("  wrote %zu safetensors file%s, config.json%s\n", files.size(), files.size() == 1 ? "" : "s",
                tokens > 0 ? ", input.safetensors (hidden_states)" : "");
  return 0;
}

}  // namespace

}  // namespace polymoe::cli
