#pragma once
// Test support for the quant schemes: stored tensors read from safetensors as quant::tensor_view,
// and the two pre-quantized Hugging Face cases (gpt_oss_mxfp4, deepseek_v3_fp8) loaded into the
// schemes' stored forms with their checkpoint factories (no requantization).
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include <polymoe/io/safetensors.hpp>
#include <polymoe/polymoe.hpp>

#include "hf_fixture.hpp"

namespace polymoe::test {

/// Copies of stored tensors that stay alive while views of them are in use.
struct TensorPool {
  std::deque<std::vector<std::uint8_t>> u8;
  std::deque<std::vector<float>> f32;

  /// `name` as raw bytes (U8 or F8_E4M3 codes), with its stored shape.
  quant::tensor_view<std::uint8_t> bytes(const io::safetensors_file& f, const std::string& name) {
    const auto& info = f.info(name);
    require(info.dtype == io::dtype::U8 || info.dtype == io::dtype::F8_E4M3, name, " is ",
            io::dtype_name(info.dtype), ", expected U8 or F8_E4M3");
    const auto raw = f.bytes(name);
    auto& v = u8.emplace_back(raw.size());
    if (!raw.empty()) std::memcpy(v.data(), raw.data(), raw.size());
    return {v, info.shape};
  }
  /// `name` as fp32 (F32 only), with its stored shape.
  quant::tensor_view<float> floats(const io::safetensors_file& f, const std::string& name) {
    const auto& info = f.info(name);
    require(info.dtype == io::dtype::F32, name, " is ", io::dtype_name(info.dtype), ", expected F32");
    auto& v = f32.emplace_back(f.to_f32(name));
    return {v, info.shape};
  }
};

template <class Store>
struct QuantCase {
  MoeConfig cfg;
  BasicMoeWeights<Store> weights;
  Matrix hidden, router_logits, expected;
};

inline void read_io(const std::filesystem::path& dir, Matrix& hidden, Matrix& logits, Matrix& expected) {
  const auto io = io::safetensors_file::open(dir / "io.safetensors");
  hidden = io.matrix("hidden_states");
  logits = io.matrix("router_logits");
  expected = io.matrix("output");
}

/// gpt_oss_mxfp4, layer 0: `experts.gate_up_proj_blocks` [E, 2I, H/32, 16] (rows interleaved:
/// even gate, odd up, as the columns of the fp32 gpt_oss `gate_up_proj` [E, H, 2I]) and
/// `down_proj_blocks` [E, H, I/32, 16], loaded with mxfp4::weights::from_blocks.
inline QuantCase<quant::mxfp4::weights> load_gpt_oss_mxfp4(quant::gate_up_order order = quant::gate_up_order::interleaved) {
  const auto dir = fixtures_dir() / "gpt_oss_mxfp4";
  const io::json c = read_json_file(dir / "config.json");
  const auto model = io::safetensors_file::open(dir / "model.safetensors");
  const std::string p = "model.layers.0.mlp.";
  QuantCase<quant::mxfp4::weights> qc;
  read_io(dir, qc.hidden, qc.router_logits, qc.expected);
  const auto& gu = model.info(p + "experts.gate_up_proj_blocks").shape;
  MoeConfig& cfg = qc.cfg;
  cfg.hidden = geti(c, "hidden_size");
  cfg.num_experts = geti(c, "num_local_experts");
  cfg.intermediate = gu[1] / 2;
  cfg.router.top_k = geti(c, "num_experts_per_tok");
  cfg.router.method = RoutingMethod::topk_softmax;
  cfg.activation = Activation::swiglu_oai;
  cfg.expert_bias = true;
  const ExpertShape s{cfg.num_experts, cfg.hidden, cfg.intermediate, true, true};
  TensorPool pool;
  qc.weights.experts = quant::mxfp4::weights::from_blocks(
      s, pool.bytes(model, p + "experts.gate_up_proj_blocks"), pool.bytes(model, p + "experts.gate_up_proj_scales"),
      pool.bytes(model, p + "experts.down_proj_blocks"), pool.bytes(model, p + "experts.down_proj_scales"),
      model.matrix(p + "experts.gate_up_proj_bias"), model.matrix(p + "experts.down_proj_bias"), order);
  qc.weights.router_weight = model.matrix(p + "router.weight");
  qc.weights.router_bias = model.matrix(p + "router.bias").row(0).transpose();
  return qc;
}

/// deepseek_v3_fp8, layer 0: per-expert F8_E4M3 `*.weight` + fp32 `*.weight_scale_inv`, routed and
/// shared experts, loaded with fp8_block::weights::from_checkpoint.
inline QuantCase<quant::fp8_block::weights> load_deepseek_v3_fp8() {
  const auto dir = fixtures_dir() / "deepseek_v3_fp8";
  const io::json c = read_json_file(dir / "config.json");
  const auto model = io::safetensors_file::open(dir / "model.safetensors");
  const std::string p = "model.layers.0.mlp.";
  QuantCase<quant::fp8_block::weights> qc;
  read_io(dir, qc.hidden, qc.router_logits, qc.expected);
  MoeConfig& cfg = qc.cfg;
  cfg.hidden = geti(c, "hidden_size");
  cfg.num_experts = geti(c, "n_routed_experts");
  cfg.intermediate = geti(c, "moe_intermediate_size");
  cfg.router.top_k = geti(c, "num_experts_per_tok");
  cfg.router.renormalize = c.at("norm_topk_prob").as_bool();
  cfg.router.method = RoutingMethod::sigmoid_grouped_topk;
  cfg.router.n_group = geti(c, "n_group");
  cfg.router.topk_group = geti(c, "topk_group");
  cfg.router.routed_scaling_factor = static_cast<float>(c.at("routed_scaling_factor").as_double());
  cfg.router.correction_bias = model.matrix(p + "gate.e_score_correction_bias").row(0).transpose();
  cfg.shared_intermediate = cfg.intermediate * geti(c, "n_shared_experts");
  TensorPool pool;
  auto expert = [&](const std::string& q) {
    quant::fp8_block::checkpoint_expert x;
    x.gate = pool.bytes(model, q + "gate_proj.weight");
    x.up = pool.bytes(model, q + "up_proj.weight");
    x.down = pool.bytes(model, q + "down_proj.weight");
    x.gate_scale_inv = pool.floats(model, q + "gate_proj.weight_scale_inv");
    x.up_scale_inv = pool.floats(model, q + "up_proj.weight_scale_inv");
    x.down_scale_inv = pool.floats(model, q + "down_proj.weight_scale_inv");
    return x;
  };
  std::vector<quant::fp8_block::checkpoint_expert> routed;
  for (index_t e = 0; e < cfg.num_experts; ++e) routed.push_back(expert(p + "experts." + std::to_string(e) + "."));
  qc.weights.experts = quant::fp8_block::weights::from_checkpoint(
      ExpertShape{cfg.num_experts, cfg.hidden, cfg.intermediate, true, false}, routed);
  const std::vector<quant::fp8_block::checkpoint_expert> shared{expert(p + "shared_experts.")};
  qc.weights.shared = quant::fp8_block::weights::from_checkpoint(
      ExpertShape{1, cfg.hidden, cfg.shared_intermediate, true, false}, shared);
  qc.weights.router_weight = model.matrix(p + "gate.weight");
  return qc;
}

}  // namespace polymoe::test
