// Uses an installed polymoe through find_package(polymoe CONFIG), compiled as a plain project
// compiles it (no -march): checks a result computed by hand (one expert, silu-gated with known
// weights), then the fast kernels against the reference kernel at every instruction-set level,
// and prints what each layer runs (run.cmake checks that against the CPU's flags).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <polymoe/polymoe.hpp>

namespace {

bool by_hand() {
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
  return ok;
}

// Layer (Q, K) at tuning isa=`level` against the reference kernel on the same scheme: the same
// dequantized weights and activation rounding, so they differ by fp32 summation order and the odd
// intermediate value rounded to the neighbouring bf16 or int8 code (the tolerance of the kernel
// agreement tests, 1e-4 of the output's largest value).
template <class Q, class K>
bool against_reference(const char* level) {
  using namespace polymoe;
  std::srand(1);  // Eigen's Random: the same data at every level
  MoeConfig cfg;
  cfg.hidden = 320;  // not a multiple of the 64-column panels
  cfg.intermediate = 200;
  cfg.num_experts = 8;
  cfg.router.top_k = 2;
  MoeWeights w;
  w.experts = ExpertWeights(ExpertShape{8, 320, 200, true, false});
  w.experts.w13.setRandom();
  w.experts.w2.setRandom();
  w.experts.w13 *= 0.05f;
  w.experts.w2 *= 0.05f;
  const Matrix x = Matrix::Random(37, 320), logits = Matrix::Random(37, 8);
  const Matrix want = MoeLayer<a2a::local, Q, kernel::reference>(cfg, w).forward(x, logits);
  K k;
  k.tuning = kernels::tiled::parse_tuning(std::string("isa=") + level);
  try {
    MoeLayer<a2a::local, Q, K> layer(cfg, w, {}, k);
    const Matrix got = layer.forward(x, logits);
    const double err = (got - want).cwiseAbs().maxCoeff(), scale = want.cwiseAbs().maxCoeff();
    const bool ok = err <= 1e-4 * scale;
    std::printf("consumer: isa=%s: %s: max |diff| %g of %g: %s\n", level, layer.describe().c_str(), err, scale,
                ok ? "ok" : "WRONG");
    return ok;
  } catch (const polymoe::error& e) {  // a level this CPU does not run: a clear error, nothing run
    const bool clear = std::string(e.what()).find("polymoe: tuning isa: this CPU does not run") == 0;
    std::printf("consumer: isa=%s: not here: %s: %s\n", level, e.what(), clear ? "ok" : "WRONG");
    return clear;
  }
}

}  // namespace

int main() {
  using namespace polymoe;
  bool ok = by_hand();
  for (const char* level : {"best", "portable", "avx512", "avx512-vnni-bf16", "avx512-zen"}) {
    ok = against_reference<quant::bf16, kernel::tiled>(level) && ok;
    ok = against_reference<quant::bf16, kernel::tiled_amx>(level) && ok;
    ok = against_reference<quant::int8_w8a8, kernel::tiled>(level) && ok;
  }
  return ok ? 0 : 1;
}
