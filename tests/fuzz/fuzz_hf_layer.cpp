// libFuzzer target: io::hf_checkpoint on an arbitrary model.safetensors. The first input byte picks
// one of five small config.json files (mixtral, qwen2_moe, qwen3_moe, deepseek_v3, gpt_oss: H=4,
// I=4, E=4, k=2), the rest is the model file; then layer 0 is loaded whole and as rank 1 of 2.
// Any crash, sanitizer report or exception other than polymoe::error is a bug.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <polymoe/io/hf_checkpoint.hpp>

namespace {
const char* const configs[] = {
    R"({"model_type":"mixtral","num_hidden_layers":1,"hidden_size":4,"intermediate_size":4,"num_local_experts":4,"num_experts_per_tok":2})",
    R"({"model_type":"qwen2_moe","num_hidden_layers":1,"hidden_size":4,"moe_intermediate_size":4,"num_experts":4,"num_experts_per_tok":2,"shared_expert_intermediate_size":4})",
    R"({"model_type":"qwen3_moe","num_hidden_layers":1,"hidden_size":4,"moe_intermediate_size":4,"num_local_experts":4,"num_experts_per_tok":2,"norm_topk_prob":true})",
    R"({"model_type":"deepseek_v3","num_hidden_layers":1,"hidden_size":4,"moe_intermediate_size":4,"n_routed_experts":4,"num_experts_per_tok":2,"n_group":2,"topk_group":1,"n_shared_experts":1,"routed_scaling_factor":2.5})",
    R"({"model_type":"gpt_oss","num_hidden_layers":1,"hidden_size":4,"intermediate_size":4,"num_local_experts":4,"num_experts_per_tok":2})",
};

struct scratch_root {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("polymoe_fuzz_hf_" + std::to_string(::getpid()));
  ~scratch_root() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::filesystem::path dir_for(int family) {
  static const scratch_root root;
  const auto d = root.path / std::to_string(family);
  if (!std::filesystem::exists(d / "config.json")) {
    std::filesystem::create_directories(d);
    std::ofstream(d / "config.json") << configs[family];
  }
  return d;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const int family = data[0] % 5;
  const auto dir = dir_for(family);
  {
    std::ofstream f(dir / "model.safetensors", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(size - 1));
  }
  try {
    const auto ckpt = polymoe::io::hf_checkpoint::open(dir);
    (void)ckpt.load_layer(0);
    (void)ckpt.load_layer(0, 1, 2);
  } catch (const polymoe::error&) {
  }
  return 0;
}
