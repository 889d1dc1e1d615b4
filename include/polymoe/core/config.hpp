#pragma once
// Run-time description of one MoE layer: shapes, the expert MLP, routing, shared experts and
// expert parallelism. Everything that varies between models lives here; everything that varies
// between deployments (dispatcher, quant scheme, kernel) is a template policy of MoeLayer.
#include <cmath>
#include <string_view>

#include <polymoe/core/error.hpp>
#include <polymoe/core/types.hpp>

namespace polymoe {

/// The expert MLP's activation. Gated variants read gate and up halves of w13 ([2I, H]: rows
/// [0, I) gate, [I, 2I) up); non-gated variants read w13 as [I, H].
enum class Activation {
  silu_gated,  ///< silu(x·Wg) * (x·Wu)        (Mixtral, Qwen, DeepSeek)
  gelu_gated,  ///< gelu_erf(x·Wg) * (x·Wu)    (GeGLU)
  swiglu_oai,  ///< GPT-OSS: g = min(g, limit), u = clamp(u, ±limit), g·sigmoid(alpha·g)·(u + 1); needs biases
  silu,        ///< non-gated: silu(x·W1)
  relu2,       ///< non-gated: relu(x·W1)^2
};

[[nodiscard]] constexpr bool is_gated(Activation a) noexcept {
  return a == Activation::silu_gated || a == Activation::gelu_gated || a == Activation::swiglu_oai;
}
[[nodiscard]] constexpr std::string_view to_string(Activation a) noexcept {
  switch (a) {
    case Activation::silu_gated: return "silu_gated";
    case Activation::gelu_gated: return "gelu_gated";
    case Activation::swiglu_oai: return "swiglu_oai";
    case Activation::silu: return "silu";
    case Activation::relu2: return "relu2";
  }
  return "?";
}

/// How router logits become top-k expert ids and weights.
enum class RoutingMethod {
  softmax_topk,          ///< softmax over E (fp32), k largest, optional renormalization (Mixtral, Qwen3-MoE)
  topk_softmax,          ///< k largest logits, softmax over those k (GPT-OSS)
  sigmoid_grouped_topk,  ///< DeepSeek-V3: sigmoid, correction bias, grouped top-k, renormalize, scale
};

/// The method's name as the enumerator spells it (messages, fingerprints, the tool).
[[nodiscard]] constexpr std::string_view to_string(RoutingMethod m) noexcept {
  switch (m) {
    case RoutingMethod::softmax_topk: return "softmax_topk";
    case RoutingMethod::topk_softmax: return "topk_softmax";
    case RoutingMethod::sigmoid_grouped_topk: return "sigmoid_grouped_topk";
  }
  return "?";
}

struct RouterConfig {
  RoutingMethod method = RoutingMethod::softmax_topk;
  index_t top_k = 2;
  bool renormalize = true;               ///< softmax_topk / sigmoid_grouped_topk: weights sum to 1
  index_t n_group = 1;                   ///< sigmoid_grouped_topk: number of expert groups
  index_t topk_group = 1;                ///< sigmoid_grouped_topk: groups kept
  float routed_scaling_factor = 1.0f;    ///< multiplies the routed weights, once, in routing
  Vector correction_bias;                ///< sigmoid_grouped_topk: e_score_correction_bias [E], or empty

  /// Throws polymoe::error naming the first field that cannot route over `num_experts` experts.
  void validate(index_t num_experts) const {
    require(top_k >= 1 && top_k <= num_experts, "MoeConfig.router.top_k must be in [1, num_experts=", num_experts,
            "], got ", top_k);
    if (method == RoutingMethod::sigmoid_grouped_topk) {
      require(n_group >= 1 && num_experts % n_group == 0, "MoeConfig.router.n_group=", n_group,
              " must divide num_experts=", num_experts);
      require(topk_group >= 1 && topk_group <= n_group, "MoeConfig.router.topk_group=", topk_group,
              " must be in [1, n_group=", n_group, "]");
      require(num_experts / n_group >= 2, "MoeConfig.router: each group needs >= 2 experts (score = top-2 sum)");
      require(topk_group * (num_experts / n_group) >= top_k, "MoeConfig.router: topk_group=", topk_group,
              " groups of ", num_experts / n_group, " experts cannot hold top_k=", top_k);
      require(correction_bias.size() == 0 || correction_bias.size() == num_experts,
              "MoeConfig.router.correction_bias has ", correction_bias.size(), " entries, expected ", num_experts);
      for (index_t e = 0; e < correction_bias.size(); ++e)
        require(std::isfinite(correction_bias[e]), "MoeConfig.router.correction_bias[", e, "] is not finite (",
                correction_bias[e], ")");
    }
    require(std::isfinite(routed_scaling_factor) && routed_scaling_factor > 0.0f,
            "MoeConfig.router.routed_scaling_factor must be finite and > 0, got ", routed_scaling_factor);
  }
};

/// One MoE layer. `num_experts` is the global count; under expert parallelism (ep_size > 1) rank r
/// owns experts [r·E/ep_size, (r+1)·E/ep_size).
struct MoeConfig {
  index_t hidden = 0;
  index_t intermediate = 0;        ///< per routed expert
  index_t num_experts = 0;
  Activation activation = Activation::silu_gated;
  float swiglu_alpha = 1.702f;
  float swiglu_limit = 7.0f;
  bool expert_bias = false;        ///< experts carry b13 [E, rows13] and b2 [E, H]
  bool router_weight_on_input = false;  ///< scale the expert input (top_k must be 1), not its output
  RouterConfig router;
  index_t shared_intermediate = 0; ///< intermediate size of the shared expert (0: none)
  bool shared_expert_gate = false; ///< Qwen2-MoE: shared output scaled by sigmoid(x·g), g [1, H]
  int ep_rank = 0;
  int ep_size = 1;

  [[nodiscard]] index_t top_k() const noexcept { return router.top_k; }
  [[nodiscard]] index_t local_experts() const noexcept { return ep_size > 0 ? num_experts / ep_size : 0; }
  [[nodiscard]] index_t first_local_expert() const noexcept { return local_experts() * ep_rank; }

  /// Throws polymoe::error naming the first inconsistent field.
  void validate() const {
    require(hidden > 0, "MoeConfig.hidden must be > 0, got ", hidden);
    require(intermediate > 0, "MoeConfig.intermediate must be > 0, got ", intermediate);
    require(num_experts > 0, "MoeConfig.num_experts must be > 0, got ", num_experts);
    router.validate(num_experts);
    require(ep_size >= 1 && ep_rank >= 0 && ep_rank < ep_size, "MoeConfig: ep_rank ", ep_rank,
            " must be in [0, ep_size=", ep_size, ")");
    require(num_experts % ep_size == 0, "MoeConfig.num_experts=", num_experts, " must be a multiple of ep_size=",
            ep_size);
    require(activation != Activation::swiglu_oai || expert_bias, "MoeConfig: activation ", to_string(activation),
            " needs expert biases (set expert_bias and provide b13/b2)");
    require(!router_weight_on_input || router.top_k == 1,
            "MoeConfig.router_weight_on_input needs top_k == 1, got top_k=", router.top_k);
    require(shared_intermediate >= 0, "MoeConfig.shared_intermediate must be >= 0");
    require(!shared_expert_gate || shared_intermediate > 0, "MoeConfig.shared_expert_gate needs a shared expert");
    if (activation == Activation::swiglu_oai)
      require(swiglu_limit > 0.0f && std::isfinite(swiglu_alpha), "MoeConfig: swiglu_limit must be > 0 and ",
              "swiglu_alpha finite, got limit=", swiglu_limit, " alpha=", swiglu_alpha);
  }
};

}  // namespace polymoe
