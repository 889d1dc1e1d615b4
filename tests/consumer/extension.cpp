// The user's extended table (toy_policies.hpp) in use: the new kernel runs the new scheme and bf16,
// and agrees with polymoe's reference kernel, which runs the new scheme too because it is generic.
#include <cmath>
#include <cstdio>
#include <random>

#include "toy_policies.hpp"

namespace {

polymoe::MoeWeights random_weights(const polymoe::MoeConfig& cfg, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  polymoe::MoeWeights w;
  w.experts = polymoe::ExpertWeights(polymoe::ExpertShape{cfg.num_experts, cfg.hidden, cfg.intermediate, true, false});
  for (polymoe::Matrix* m : {&w.experts.w13, &w.experts.w2})
    for (polymoe::index_t i = 0; i < m->size(); ++i) m->data()[i] = u(rng);
  return w;
}

template <class Quant>
bool agrees(const char* what, const polymoe::MoeConfig& cfg, const polymoe::MoeWeights& w, const polymoe::Matrix& x,
            const polymoe::Matrix& logits) {
  toy::layer<polymoe::a2a::local, Quant, toy::loop_kernel> mine(cfg, w);
  toy::layer<polymoe::a2a::local, Quant, polymoe::kernel::reference> oracle(cfg, w);
  const polymoe::Matrix y = mine.forward(x, logits), r = oracle.forward(x, logits);
  const double rel = (y - r).norm() / r.norm();
  const bool ok = std::isfinite(rel) && rel < 1e-5 && r.norm() > 0;
  std::printf("extension: %s on toy::loop_kernel vs kernel::reference: relative difference %.3g: %s\n", what, rel,
              ok ? "ok" : "WRONG");
  return ok;
}

}  // namespace

int main() {
  static_assert(!polymoe::can_make_layer<polymoe::a2a::local, toy::grid16, polymoe::kernel::reference>,
                "the core table is not changed by an extension");
  polymoe::MoeConfig cfg;
  cfg.hidden = 32;
  cfg.intermediate = 16;
  cfg.num_experts = 4;
  cfg.router.top_k = 2;
  const polymoe::MoeWeights w = random_weights(cfg, 7);
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 1.0f);
  polymoe::Matrix x(5, cfg.hidden), logits(5, cfg.num_experts);
  for (polymoe::index_t i = 0; i < x.size(); ++i) x.data()[i] = n(rng);
  for (polymoe::index_t i = 0; i < logits.size(); ++i) logits.data()[i] = n(rng);
  const bool ok = agrees<toy::grid16>("grid16", cfg, w, x, logits) & agrees<polymoe::quant::bf16>("bf16", cfg, w, x, logits);
  return ok ? 0 : 1;
}
