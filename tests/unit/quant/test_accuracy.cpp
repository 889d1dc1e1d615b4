// Accuracy of each quant scheme on random data: one layer (E = 8, H = 512, I = 256, k = 2,
// silu-gated, T = 64, weights N(0, 1/fan_in), hidden N(0, 1)) quantized with the scheme, against
// the same layer in fp32, both on the reference kernel. Prints the figures docs/quantization.md
// quotes (run: ./build/tests/test_quant --gtest_filter='QuantAccuracy.*').
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace polymoe;

namespace {

struct Figures {
  double rel_rms, rel_max;
};

template <class Q>
Figures measure(index_t H, index_t I) {
  std::mt19937 rng(2024);
  MoeConfig cfg;
  cfg.hidden = H;
  cfg.intermediate = I;
  cfg.num_experts = 8;
  cfg.router.top_k = 2;
  const MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, 64, H);
  const Routing r = test::random_routing(rng, 64, 8, 2);
  MoeLayer<a2a::local, quant::fp32, kernel::reference> ref(cfg, w);
  MoeLayer<a2a::local, Q, kernel::reference> layer(cfg, w);
  const Matrix want = ref.forward_routed(hidden, r.ids, r.weights);
  const Matrix got = layer.forward_routed(hidden, r.ids, r.weights);
  return {std::sqrt((got - want).squaredNorm() / want.squaredNorm()), test::relative_error(got, want)};
}

template <class Q>
void check(double rms_bound) {
  const Figures a = measure<Q>(512, 256), b = measure<Q>(200, 72);  // b: K not a multiple of any block
  std::printf("| %-22s | %.4f | %.4f | %.4f |\n", std::string(Q::name).c_str(), a.rel_rms, a.rel_max, b.rel_rms);
  EXPECT_LE(a.rel_rms, rms_bound) << Q::name;
  EXPECT_LE(b.rel_rms, rms_bound) << Q::name;
  EXPECT_GT(a.rel_rms, 0.0) << Q::name;  // a quantized layer is not the fp32 one
}

TEST(QuantAccuracy, RelativeRmsErrorAgainstFp32) {
  std::printf("| scheme | rel. RMS (H=512, I=256) | max abs err / max abs | rel. RMS (H=200, I=72) |\n");
  // Bounds: about 1.5x the figures measured when the schemes were written (docs/quantization.md).
  check<quant::bf16>(0.01);
  check<quant::fp8>(0.09);
  check<quant::fp8_block>(0.09);
  check<quant::fp8_block_weight_only>(0.07);
  check<quant::int8_w8a8>(0.035);
  check<quant::int4_w4a8>(0.26);
  check<quant::mxfp4>(0.3);
  check<quant::nvfp4>(0.25);
  check<quant::nvfp4_w4a4>(0.35);
  check<quant::mxfp4_w4a16>(0.3);
  check<quant::nvfp4_w4a16>(0.25);
}

}  // namespace
