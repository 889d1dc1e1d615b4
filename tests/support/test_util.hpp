#pragma once
// Shared helpers for polymoe tests: random layers, tolerances per scheme, the valid-triple list.
#include <random>
#include <string>

#include <gtest/gtest.h>

#include <polymoe/polymoe.hpp>

namespace polymoe::test {

/// Tolerance (max abs error / max abs output) of a scheme against fp32 ground truth.
template <class Q>
inline constexpr double fixture_tolerance = 1e-5;
template <>
inline constexpr double fixture_tolerance<quant::bf16> = 2e-2;

/// Tolerance of a kernel against the reference kernel on the same scheme (same arithmetic, other order).
template <class Q>
inline constexpr double kernel_tolerance = 2e-5;
template <>
inline constexpr double kernel_tolerance<quant::bf16> = 2e-2;

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
  Routing r{IdMatrix(T, k), Matrix(T, k)};
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
