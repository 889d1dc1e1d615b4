#pragma once
// Test support: reads one layer of a ../shared/fixtures/hf case (config.json + model.safetensors +
// io.safetensors, all written by Hugging Face transformers) into a MoeConfig and fp32 MoeWeights.
// A minimal, test-only mapping of the four families; the real checkpoint loader is polymoe's own.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <polymoe/core/expert_weights.hpp>
#include <polymoe/io/json.hpp>
#include <polymoe/io/safetensors.hpp>

namespace polymoe::test {

inline std::filesystem::path fixtures_dir() { return std::filesystem::path(POLYMOE_FIXTURES_DIR) / "hf"; }

struct HfCase {
  std::string name;
  MoeConfig cfg;
  MoeWeights weights;
  Matrix hidden, router_logits, expected;
};

inline io::json read_json_file(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return io::parse_json(ss.str(), p.string());
}

inline index_t geti(const io::json& c, std::string_view k) { return c.at(k).as_int(); }

inline HfCase load_hf_case(const std::string& name) {
  const auto dir = fixtures_dir() / name;
  const io::json c = read_json_file(dir / "config.json");
  const auto model = io::safetensors_file::open(dir / "model.safetensors");
  const auto io = io::safetensors_file::open(dir / "io.safetensors");
  HfCase hc;
  hc.name = name;
  hc.hidden = io.matrix("hidden_states");
  hc.router_logits = io.matrix("router_logits");
  hc.expected = io.matrix("output");

  const std::string type = c.at("model_type").as_string();
  MoeConfig& cfg = hc.cfg;
  cfg.hidden = geti(c, "hidden_size");
  cfg.num_experts = c.contains("num_local_experts") ? geti(c, "num_local_experts")
                    : c.contains("n_routed_experts") ? geti(c, "n_routed_experts")
                                                     : geti(c, "num_experts");
  cfg.router.top_k = geti(c, "num_experts_per_tok");
  const std::string mlp = type == "mixtral" ? "model.layers.0.block_sparse_moe." : "model.layers.0.mlp.";
  auto per_expert = [&](const std::string& gate, const std::string& up, const std::string& down, index_t E,
                        index_t I, const std::string& prefix) {
    ExpertWeights w(ExpertShape{E, cfg.hidden, I, true, false});
    for (index_t e = 0; e < E; ++e) {
      const std::string p = prefix + (E == 1 && prefix.find("shared") != std::string::npos ? "" : std::to_string(e) + ".");
      w.w13_of(e).topRows(I) = model.matrix(p + gate);
      w.w13_of(e).bottomRows(I) = model.matrix(p + up);
      w.w2_of(e) = model.matrix(p + down);
    }
    return w;
  };

  if (type == "mixtral") {
    cfg.intermediate = geti(c, "intermediate_size");
    cfg.router.renormalize = true;
    hc.weights.experts =
        per_expert("w1.weight", "w3.weight", "w2.weight", cfg.num_experts, cfg.intermediate, mlp + "experts.");
    hc.weights.router_weight = model.matrix(mlp + "gate.weight");
  } else if (type == "qwen3_moe" || type == "deepseek_v3") {
    cfg.intermediate = geti(c, "moe_intermediate_size");
    cfg.router.renormalize = c.at("norm_topk_prob").as_bool();
    hc.weights.experts = per_expert("gate_proj.weight", "up_proj.weight", "down_proj.weight", cfg.num_experts,
                                    cfg.intermediate, mlp + "experts.");
    hc.weights.router_weight = model.matrix(mlp + "gate.weight");
    if (type == "deepseek_v3") {
      cfg.router.method = RoutingMethod::sigmoid_grouped_topk;
      cfg.router.n_group = geti(c, "n_group");
      cfg.router.topk_group = geti(c, "topk_group");
      cfg.router.routed_scaling_factor = static_cast<float>(c.at("routed_scaling_factor").as_double());
      const Matrix bias = model.matrix(mlp + "gate.e_score_correction_bias");
      cfg.router.correction_bias = bias.row(0).transpose();
      cfg.shared_intermediate = cfg.intermediate * geti(c, "n_shared_experts");
      hc.weights.shared = per_expert("gate_proj.weight", "up_proj.weight", "down_proj.weight", 1,
                                     cfg.shared_intermediate, mlp + "shared_experts.");
    }
  } else if (type == "gpt_oss") {
    const auto& gu = model.info(mlp + "experts.gate_up_proj").shape;  // [E, H, 2I]
    const index_t E = gu[0], H = gu[1], I = gu[2] / 2;
    cfg.intermediate = I;
    cfg.router.method = RoutingMethod::topk_softmax;
    cfg.activation = Activation::swiglu_oai;
    cfg.expert_bias = true;
    ExpertWeights w(ExpertShape{E, H, I, true, true});
    const auto gate_up = model.to_f32(mlp + "experts.gate_up_proj");
    const auto gate_up_b = model.to_f32(mlp + "experts.gate_up_proj_bias");
    const auto down = model.to_f32(mlp + "experts.down_proj");  // [E, I, H]
    const auto down_b = model.to_f32(mlp + "experts.down_proj_bias");
    for (index_t e = 0; e < E; ++e) {
      const Eigen::Map<const Matrix> gu_e(gate_up.data() + e * H * 2 * I, H, 2 * I);
      w.w13_of(e) = deinterleave_gate_up(gu_e);
      const Eigen::Map<const Matrix> gub(gate_up_b.data() + e * 2 * I, 1, 2 * I);
      w.b13.row(e) = deinterleave_bias(gub);
      const Eigen::Map<const Matrix> d_e(down.data() + e * I * H, I, H);
      w.w2_of(e) = d_e.transpose();
      w.b2.row(e) = Eigen::Map<const Matrix>(down_b.data() + e * H, 1, H);
    }
    hc.weights.experts = std::move(w);
    hc.weights.router_weight = model.matrix(mlp + "router.weight");
    const Matrix rb = model.matrix(mlp + "router.bias");
    hc.weights.router_bias = rb.row(0).transpose();
  } else {
    throw error("test fixture loader: unknown model_type " + type);
  }
  return hc;
}

}  // namespace polymoe::test
