#pragma once
// The shapes of real MoE models (and tiny ones of each layout), by name: what `polymoe
// make-checkpoint --preset` writes and what the benchmarks run. One list, here.
#include <string>
#include <string_view>

#include <polymoe/core/types.hpp>
#include <polymoe/io/hf_checkpoint.hpp>

namespace polymoe::io {

struct model_preset {
  std::string_view name;
  hf_family family;
  index_t hidden, intermediate, experts, top_k;
  index_t layers;                     ///< MoE layers make-checkpoint writes by default
  index_t shared = 0;                 ///< deepseek: n_shared_experts; qwen2_moe: shared_expert_intermediate_size
  index_t n_group = 1, topk_group = 1;
  double scaling = 1.0;               ///< routed scaling factor
  /// How the synthetic checkpoint stores its experts (the real model's own form): "f32", "bf16",
  /// or the name of a scheme's checkpoint layout (quant::checkpoint_layout).
  std::string_view stored = "bf16";
  std::string_view about;
};

inline constexpr model_preset model_presets[] = {
    {"tiny", hf_family::qwen3_moe, 256, 128, 16, 4, 2, 0, 1, 1, 1.0, "bf16", "Qwen3-MoE layout, BF16"},
    {"tiny-mixtral", hf_family::mixtral, 128, 256, 8, 2, 2, 0, 1, 1, 1.0, "bf16", "Mixtral layout, BF16"},
    {"tiny-qwen2-moe", hf_family::qwen2_moe, 128, 64, 8, 2, 2, 256, 1, 1, 1.0, "f32",
     "Qwen2-MoE layout, shared expert with sigmoid gate, F32"},
    {"tiny-deepseek-v3", hf_family::deepseek_v3, 256, 128, 16, 4, 2, 1, 4, 2, 2.5, "fp8_block",
     "DeepSeek-V3 layout, grouped routing, shared expert, FP8 128x128 blocks"},
    {"tiny-gpt-oss", hf_family::gpt_oss, 128, 128, 8, 2, 2, 0, 1, 1, 1.0, "mxfp4", "GPT-OSS layout, MXFP4 experts"},
    {"mixtral-8x7b", hf_family::mixtral, 4096, 14336, 8, 2, 1, 0, 1, 1, 1.0, "bf16",
     "Mixtral-8x7B shapes (32 layers in the real model), BF16"},
    {"qwen3-30b-a3b", hf_family::qwen3_moe, 2048, 768, 128, 8, 1, 0, 1, 1, 1.0, "bf16",
     "Qwen3-30B-A3B shapes (48 layers in the real model), BF16"},
    {"deepseek-v3", hf_family::deepseek_v3, 7168, 2048, 256, 8, 1, 1, 8, 4, 2.5, "fp8_block",
     "DeepSeek-V3 shapes (61 layers in the real model), FP8 blocks"},
    {"gpt-oss-20b", hf_family::gpt_oss, 2880, 2880, 32, 4, 1, 0, 1, 1, 1.0, "mxfp4",
     "GPT-OSS-20B shapes (24 layers in the real model), MXFP4"},
};

/// The preset called `name`, or nullptr.
inline const model_preset* find_model_preset(std::string_view name) noexcept {
  for (const auto& p : model_presets)
    if (p.name == name) return &p;
  return nullptr;
}

/// "tiny, tiny-mixtral, ...": the names, for messages and help text.
inline std::string model_preset_names() {
  std::string s;
  for (const auto& p : model_presets) {
    if (!s.empty()) s += ", ";
    s += p.name;
  }
  return s;
}

}  // namespace polymoe::io
