// Uses an installed polymoe through find_package(polymoe CONFIG): builds one layer and checks a
// result computed by hand (one expert, linear enough to state: silu-gated with known weights).
#include <cmath>
#include <cstdio>

#include <polymoe/polymoe.hpp>

int main() {
  using namespace polymoe;
  MoeConfig cfg;
  cfg.hidden = 2;
  cfg.intermediate = 1;
  cfg.num_experts = 1;
  cfg.router.top_k = 1;
  MoeWeights w;
  w.experts = ExpertWeights(ExpertShape{1, 2, 1, true, false});
  w.experts.w13 << 1.0f, 0.0f,  // gate = x0
      0.0f, 1.0f;               // up = x1
  w.experts.w2 << 1.0f, 2.0f;   // y = (h, 2h)
  MoeLayer<a2a::local, quant::fp32, kernel::tbb_grouped> layer(cfg, w);
  Matrix x(1, 2);
  x << 1.0f, 3.0f;
  const Matrix y = layer.forward(x, Matrix::Zero(1, 1));
  const float h = 1.0f / (1.0f + std::exp(-1.0f)) * 3.0f;  // silu(1) * 3, routing weight 1
  const bool ok = std::abs(y(0, 0) - h) < 1e-5f && std::abs(y(0, 1) - 2 * h) < 1e-5f;
  std::printf("consumer: y = (%f, %f), expected (%f, %f): %s\n", y(0, 0), y(0, 1), h, 2 * h, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
