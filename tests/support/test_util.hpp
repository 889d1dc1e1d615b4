#pragma once
// Shared helpers for polymoe tests: random layers, tolerances per scheme, the valid-triple list.
#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <polymoe/polymoe.hpp>

#include "layer_instances.hpp"
#include "test_tuning.hpp"

namespace polymoe::test {

/// Tolerance (max abs error / max abs output) of a scheme against fp32 ground truth.
template <class Q>
inline constexpr double fixture_tolerance = 1e-5;
template <>
inline constexpr double fixture_tolerance<quant::bf16> = 2e-2;
// Quantized schemes, fed the fixtures' fp32 weights: the bound is the scheme's own quantization
// error, the largest measured on the four fp32 fixtures (docs/quantization.md: fp8 0.068,
// fp8_block 0.121, fp8_block_weight_only 0.069, int8_w8a8 0.021, int4_w4a8 0.206, mxfp4 0.210,
// nvfp4 0.179, nvfp4_w4a4 0.300) with 1.5x headroom. Loose, but a layout or scale bug gives errors of order 1;
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
inline constexpr double fixture_tolerance<quant::int4_w4a8> = 0.31;
template <>
inline constexpr double fixture_tolerance<quant::mxfp4> = 0.30;
template <>
inline constexpr double fixture_tolerance<quant::nvfp4> = 0.27;
template <>
inline constexpr double fixture_tolerance<quant::nvfp4_w4a4> = 0.45;
// W4A16 (measured mxfp4_w4a16 0.210, nvfp4_w4a16 0.179: the weights' error dominates bf16's).
template <>
inline constexpr double fixture_tolerance<quant::mxfp4_w4a16> = 0.32;
template <>
inline constexpr double fixture_tolerance<quant::nvfp4_w4a16> = 0.27;

/// Tolerance of a kernel against the reference kernel on the same scheme (same arithmetic, other order).
template <class Q>
inline constexpr double kernel_tolerance = 2e-5;
// bf16: the reference, too, rounds both GEMM inputs to bf16, so kernels differ by summation order
// and, like the schemes below that quantize activations, by the odd intermediate value rounded to
// the neighbouring bf16 (a flip, set aside as below).
template <>
inline constexpr double kernel_tolerance<quant::bf16> = 1e-4;
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
inline constexpr double kernel_tolerance<quant::int4_w4a8> = 1e-4;
template <>
inline constexpr double kernel_tolerance<quant::mxfp4> = 1e-4;
template <>
inline constexpr double kernel_tolerance<quant::nvfp4> = 1e-4;
template <>
inline constexpr double kernel_tolerance<quant::nvfp4_w4a4> = 1e-4;
template <>
inline constexpr double kernel_tolerance<quant::mxfp4_w4a16> = 1e-4;
template <>
inline constexpr double kernel_tolerance<quant::nvfp4_w4a16> = 1e-4;

template <class A, class Q, class K>
std::string triple_name() {
  return std::string(A::name) + "/" + std::string(Q::name) + "/" + std::string(K::name);
}

/// A layer's configuration: hidden H, intermediate I, E experts, top-k, the activation, and expert
/// biases (by default when the activation is swiglu_oai: GPT-OSS's, which has them).
inline MoeConfig moe_config(index_t H, index_t I, index_t E, index_t k, Activation act, bool bias) {
  MoeConfig cfg;
  cfg.hidden = H;
  cfg.intermediate = I;
  cfg.num_experts = E;
  cfg.router.top_k = k;
  cfg.activation = act;
  cfg.expert_bias = bias;
  return cfg;
}
inline MoeConfig moe_config(index_t H, index_t I, index_t E, index_t k, Activation act = Activation::silu_gated) {
  return moe_config(H, I, E, k, act, act == Activation::swiglu_oai);
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

/// Schemes that quantize activations. Two kernels that sum in different orders can round an
/// activation lying within an ulp of a code boundary to neighbouring codes (a "flip"); that moves
/// the token's output by about one code step times a weight column, while every other token agrees
/// to summation-order precision. Measured: one token at 4.8e-4 (fp8, H=257, I=97, the rest 4e-7).
template <class Q>
inline constexpr bool quantizes_activations = false;
template <>
inline constexpr bool quantizes_activations<quant::bf16> = true;
template <>
inline constexpr bool quantizes_activations<quant::fp8> = true;
template <>
inline constexpr bool quantizes_activations<quant::fp8_block> = true;
template <>
inline constexpr bool quantizes_activations<quant::int8_w8a8> = true;
template <>
inline constexpr bool quantizes_activations<quant::int4_w4a8> = true;
template <>
inline constexpr bool quantizes_activations<quant::nvfp4_w4a4> = true;
template <>
inline constexpr bool quantizes_activations<quant::mxfp4_w4a16> = true;
template <>
inline constexpr bool quantizes_activations<quant::nvfp4_w4a16> = true;

/// A token's output may move by this much (relative, as relative_error) through a flip: about
/// one code step of the activation format (bf16 2^-8, int8 amax/127, E4M3 up to 2^-3 and E2M1 up
/// to 1/2 of the value) times the flipped activation's share of the output, largest where I is
/// small. Measured: fp8_block 3.1e-2 at H=16, I=9 (one token of 65; the others within 1.8e-7).
template <class Q>
inline constexpr double flip_tolerance = 1e-2;
template <>
inline constexpr double flip_tolerance<quant::fp8> = 5e-2;
template <>
inline constexpr double flip_tolerance<quant::fp8_block> = 5e-2;
template <>
inline constexpr double flip_tolerance<quant::nvfp4_w4a4> = 1e-1;

/// The error of a kernel against the reference on scheme Q, to compare with kernel_tolerance<Q>:
/// relative_error per token, maximised over tokens, except that for a scheme that quantizes
/// activations up to T/16 tokens whose error stays under flip_tolerance<Q> are set aside as flips (a
/// kernel bug moves far more tokens, or moves one further). Under 16 tokens (decode) none is: a
/// small batch must agree everywhere, so a decode-path error cannot hide as a flip.
template <class Q>
double kernel_agreement_error(const Matrix& got, const Matrix& want) {
  const double scale = want.size() ? want.cwiseAbs().maxCoeff() : 0.0;
  std::vector<double> err;
  for (index_t t = 0; t < want.rows(); ++t)
    err.push_back((got.row(t) - want.row(t)).cwiseAbs().maxCoeff() / (scale > 0 ? scale : 1.0));
  std::sort(err.begin(), err.end(), std::greater<>());
  std::size_t skip = 0;
  if constexpr (quantizes_activations<Q>)
    while (skip < err.size() && skip < err.size() / 16 && err[skip] > kernel_tolerance<Q> &&
           err[skip] <= flip_tolerance<Q>)
      ++skip;
  return skip < err.size() ? err[skip] : 0.0;
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
