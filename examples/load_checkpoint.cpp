// Loads one MoE layer of a Hugging Face checkpoint and runs it with the fast CPU kernel: a layer
// stored in a scheme's form (DeepSeek-V3's FP8 blocks, GPT-OSS's MXFP4, ...) keeps its codes and
// runs the scheme its checkpoint layout names; float weights (BF16, F32) run bf16.
//   load_checkpoint DIR [LAYER]      (polymoe make-checkpoint --preset tiny --out DIR writes one)
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <variant>

#include <polymoe/io/hf_checkpoint.hpp>
#include <polymoe/polymoe.hpp>

using namespace polymoe;

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: load_checkpoint DIR [LAYER]\n");
    return 2;
  }
  const auto ckpt = io::hf_checkpoint::open(argv[1]);
  const index_t n = argc > 2 ? std::atol(argv[2]) : ckpt.moe_layers().at(0);
  io::hf_layer L = ckpt.load_layer(n);  // its MoeConfig, and its weights as stored (a variant)
  const Matrix hidden = Matrix::Random(4, L.cfg.hidden);
  std::visit(
      [&](auto& w) {
        using W = std::decay_t<decltype(w)>;
        if constexpr (std::is_same_v<W, MoeWeights>) {  // float weights: quantized to bf16 once
          MoeLayer<a2a::local, quant::bf16, kernel::tiled> layer(L.cfg, w);
          const Matrix out = layer.forward(hidden);  // routed by the layer's own router weight
          std::printf("layer %ld: %s, |out| max %g\n", static_cast<long>(n), layer.describe().c_str(),
                      static_cast<double>(out.cwiseAbs().maxCoeff()));
        } else {  // BasicMoeWeights<S>: a scheme's stored form, used as it is
          using Q = typename quant::checkpoint_layout<std::decay_t<decltype(w.experts)>>::scheme;
          MoeLayer<a2a::local, Q, kernel::tiled> layer(L.cfg, std::move(w));
          const Matrix out = layer.forward(hidden);
          std::printf("layer %ld: %s (stored %s), |out| max %g\n", static_cast<long>(n), layer.describe().c_str(),
                      std::string(L.scheme.name()).c_str(), static_cast<double>(out.cwiseAbs().maxCoeff()));
        }
      },
      L.weights);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
