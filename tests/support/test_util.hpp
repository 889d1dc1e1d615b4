#pragma once
// Shared helpers for polymoe tests: random layers, tolerances per scheme, the valid-triple list.
#include <random>
#include <string>

#include <gtest/gtest.h>

#include <polymoe/polymoe.hpp>

#include "layer_instances.hpp"

namespace polymoe::test {

/// Tolerance (max abs error / max abs output) of a scheme against fp32 ground truth.
template <class Q>
inline constexpr double fixture_tolerance = 1e-5;
template <>
inline constexpr double fixture_tolerance<quant::bf16> = 2e-2;
// Quantized schemes, fed the fixtures' fp32 weights: the bound is the scheme's own quantization
// error, the largest measured on the four fp32 fixtures (docs/quantization.md: fp8 0.068,
// fp8_block 0.121, fp8_block_weight_only 0.069, int8_w8a8 0.021, mxfp4 0.210, nvfp4 0.179,
// nvfp4_w4a4 0.300) with 1.5x headroom. Loose, but a layout or scale bug gives errors of order 1;
// the exact checks of these schemes are the pre-quantized fixtures in tests/unit/quant.
template <>
inline constexpr double fixture_tolerance<quant::fp8> = 0.10;
template <>
inline constexpr double fixture_tolerance<quant::fp8_block> = 0.18;
template <>
inline constexpr double fixture_tolerance<quant::fp8_block_weight_only> = 0.10;
template <>
inline constexpr double fixture_tolerance<quant::int8_w8a8> = 0.03;
template <>
inline constexpr double fixture_tolerance<quant::mxfp4> = 0.30;
template <>
inline constexpr double fixture_tolerance<quant::nvfp4> = 0.27;
template <>
inline constexpr double fixture_tolerance<quant::nvfp4_w4a4> = 0.45;

/// Tolerance of a kernel against the reference kernel on the same scheme (same arithmetic, other order).
template <class Q>
inline constexpr double kernel_tolerance = 2e-5;
template <>
inline constexpr double kernel_tolerance<quant::bf16> = 2e-2;
// Quantized schemes: every kernel dequantizes to the same fp32 weights, so only the summation
// order differs (measured at most 4.4e-7). Schemes that quantize activations round identical input
// rows identically; the down-projection input could flip one code only where an fp32
// pre-activation lies within ~1e-7 relative of a rounding boundary, which no agreement shape hits.
// Should a new shape hit one, it shows as one isolated error of 1e-3..1e-1 on an
// activation-quantizing scheme while its weight-only twin stays near 1e-7.
template <>
inline constexpr double kernel_tolerance<quant::fp8> = 1e-4;
template <>
inline constexpr double kernel_tolerance<quant::fp8_block> = 1e-4;
template <>
inline constexpr double kernel_tolerance<quant::fp8_block_weight_only> = 1e-4;
template <>
inline constexpr double kernel_tolerance<quant::int8_w8a8> = 1e-4;
template <>
inline constexpr double kernel_tolerance<quant::mxfp4> = 1e-4;
template <>
inline constexpr double kernel_tolerance<quant::nvfp4> = 1e-4;
template <>
inline constexpr double kernel_tolerance<quant::nvfp4_w4a4> = 1e-4;

template <class A, class Q, class K>
std::string triple_name() {
  return std::string(A::name) + "/" + std::string(Q::name) + "/" + std::string(K::name);
}

inline Matrix random_matrix(std::mt19937& rng, index_t r, index_t c, float scale = 1.0f) {
  std::normal_distribution<float> n(0.0f, scale);
  Matrix m(r, c);
  for (index_t i = 0; i < m.size(); ++i) m.data()[i] = n(rng);
  return m;
}

inline ExpertWeights random_experts(std::mt19937& rng, ExpertShape s) {
  ExpertWeights w(s);
  w.w13 = random_matrix(rng, w.w13.rows(), w.w13.cols(), 1.0f / std::sqrt(static_cast<float>(s.hidden)));
  w.w2 = random_matrix(rng, w.w2.rows(), w.w2.cols(), 1.0f / std::sqrt(static_cast<float>(s.intermediate)));
  if (s.bias) {
    w.b13 = random_matrix(rng, w.b13.rows(), w.b13.cols(), 0.1f);
    w.b2 = random_matrix(rng, w.b2.rows(), w.b2.cols(), 0.1f);
  }
  return w;
}

inline MoeWeights random_weights(std::mt19937& rng, const MoeConfig& cfg) {
  MoeWeights w;
  w.experts = random_experts(rng, ExpertShape{cfg.local_experts(), cfg.hidden, cfg.intermediate,
                                              is_gated(cfg.activation), cfg.expert_bias});
  if (cfg.shared_intermediate > 0)
    w.shared = random_experts(rng, ExpertShape{1, cfg.hidden, cfg.shared_intermediate, is_gated(cfg.activation), false});
  if (cfg.shared_expert_gate) w.shared_gate = random_matrix(rng, 1, cfg.hidden);
  return w;
}

/// max |a - b| / max |b| (the fixtures' tolerance measure).
inline double relative_error(const Matrix& got, const Matrix& want) {
  const double scale = want.cwiseAbs().maxCoeff();
  return (got - want).cwiseAbs().maxCoeff() / (scale > 0 ? scale : 1.0);
}

/// Random routing: k distinct experts per token, positive weights.
inline Routing random_routing(std::mt19937& rng, index_t T, index_t E, index_t k) {
  Routing r;
  r.ids.resize(T, k);
  r.weights.resize(T, k);
  std::vector<std::int32_t> perm(static_cast<std::size_t>(E));
  std::uniform_real_distribution<float> u(0.05f, 1.0f);
  for (index_t t = 0; t < T; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (index_t j = 0; j < k; ++j) r.ids(t, j) = perm[j], r.weights(t, j) = u(rng);
  }
  return r;
}

}  // namespace polymoe::test
