#pragma once
// Scalar activation functions and the gated combination, shared by every kernel so that all of
// them compute the same function (kernels may vectorise, but must agree with these).
#include <algorithm>
#include <cmath>

#include <polymoe/core/config.hpp>

namespace polymoe {

struct ActivationParams {
  Activation kind = Activation::silu_gated;
  float alpha = 1.702f;
  float limit = 7.0f;
};

namespace act {
inline float silu(float x) noexcept { return x / (1.0f + std::exp(-x)); }
inline float gelu_erf(float x) noexcept { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }
inline float relu2(float x) noexcept { return x > 0.0f ? x * x : 0.0f; }
inline float swiglu_oai(float g, float u, float alpha, float limit) noexcept {
  g = std::min(g, limit);
  u = std::clamp(u, -limit, limit);
  return g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
}
}  // namespace act

/// h[j] = f(pre[j]) (non-gated, pre has I entries) or f(pre[j], pre[I + j]) (gated, pre has 2I).
inline void apply_activation(const ActivationParams& p, const float* pre, float* h, index_t inter) noexcept {
  switch (p.kind) {
    case Activation::silu_gated:
      for (index_t j = 0; j < inter; ++j) h[j] = act::silu(pre[j]) * pre[inter + j];
      break;
    case Activation::gelu_gated:
      for (index_t j = 0; j < inter; ++j) h[j] = act::gelu_erf(pre[j]) * pre[inter + j];
      break;
    case Activation::swiglu_oai:
      for (index_t j = 0; j < inter; ++j) h[j] = act::swiglu_oai(pre[j], pre[inter + j], p.alpha, p.limit);
      break;
    case Activation::silu:
      for (index_t j = 0; j < inter; ++j) h[j] = act::silu(pre[j]);
      break;
    case Activation::relu2:
      for (index_t j = 0; j < inter; ++j) h[j] = act::relu2(pre[j]);
      break;
  }
}

}  // namespace polymoe
