// The scalar activations of include/polymoe/core/activation.hpp against values worked out by hand
// from their definitions (DESIGN.md; computed in double precision outside the library), around
// GPT-OSS's clamp in particular: the gate is clamped from above only, up on both sides.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include <polymoe/core/activation.hpp>

using namespace polymoe;

namespace {

// 1e-5: float's roundings of alpha * g and of exp (a few ulps, 2e-6 near the -20 case), far under
// what a wrong formula costs (gelu's tanh form is 1.8e-4 off at 1; a wrong clamp, O(1)).
void expect_close(float got, double want) {
  EXPECT_NEAR(got, want, 1e-5 * std::fabs(want) + 1e-30) << "want " << want;
}

TEST(Activation, SiluGeluRelu2) {
  expect_close(act::silu(1.0f), 0.7310585786300049);    // 1 / (1 + e^-1)
  expect_close(act::silu(-2.0f), -0.2384058440442351);  // -2 / (1 + e^2)
  expect_close(act::gelu_erf(1.0f), 0.8413447460685429);   // (1 + erf(1/sqrt 2)) / 2: erf, not tanh
  expect_close(act::gelu_erf(-0.5f), -0.15426876936299344);
  EXPECT_EQ(act::relu2(-1.0f), 0.0f);
  EXPECT_EQ(act::relu2(3.0f), 9.0f);
}

TEST(Activation, SwigluOaiClampsTheGateFromAboveAndUpOnBothSides) {
  // out = min(g, 7) * sigmoid(1.702 * min(g, 7)) * (clamp(u, -7, 7) + 1)
  const auto f = [](float g, float u) { return act::swiglu_oai(g, u, 1.702f, 7.0f); };
  expect_close(f(20.0f, 20.0f), 55.99962502642654);        // both clamped: 7 * sigmoid(11.914) * 8
  expect_close(f(7.0f, 7.0f), 55.99962502642654);          // at the limit
  expect_close(f(6.9f, 7.1f), 55.19956180431813);          // gate under, up over
  expect_close(f(7.5f, -7.5f), -41.99971876981991);        // up clamped from below: (-7 + 1)
  expect_close(f(1.0f, -8.0f), -5.074774595596928);
  expect_close(f(-20.0f, -20.0f), 1.9760461448396248e-13);  // no lower clamp on the gate
  expect_close(f(-3.0f, -7.0f), 0.10842785824671582);
  expect_close(f(-1.0f, 0.5f), -0.23130635110076805);
  EXPECT_TRUE(std::isnan(f(std::numeric_limits<float>::quiet_NaN(), 1.0f)));
  EXPECT_TRUE(std::isnan(f(1.0f, std::numeric_limits<float>::quiet_NaN())));
}

TEST(Activation, ApplyActivationTakesGateThenUp) {
  // pre = [gate (I) | up (I)]: the halves are not interchangeable under the clamp.
  const float pre[4] = {20.0f, -1.0f, 1.0f, 0.5f};
  float h[2];
  apply_activation(ActivationParams{Activation::swiglu_oai}, pre, h, 2);
  expect_close(h[0], 7.0 / (1.0 + std::exp(-1.702 * 7.0)) * 2.0);  // g 20 -> 7, u 1
  expect_close(h[1], -0.23130635110076805);
  apply_activation(ActivationParams{Activation::silu_gated}, pre, h, 2);
  expect_close(h[0], 20.0 / (1.0 + std::exp(-20.0)) * 1.0);
  apply_activation(ActivationParams{Activation::relu2}, pre, h, 2);
  EXPECT_EQ(h[0], 400.0f);
  EXPECT_EQ(h[1], 0.0f);
}

}  // namespace
