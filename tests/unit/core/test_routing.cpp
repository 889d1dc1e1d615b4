// Routing against independent double-precision formulas written here from the peers' definitions.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <gtest/gtest.h>

#include <polymoe/core/routing.hpp>

using namespace polymoe;

namespace {
Matrix row(std::initializer_list<float> v) {
  Matrix m(1, static_cast<index_t>(v.size()));
  index_t i = 0;
  for (float x : v) m(0, i++) = x;
  return m;
}
}  // namespace

TEST(Routing, SoftmaxTopkRenormalized) {
  RouterConfig rc;
  rc.top_k = 2;
  const Matrix z = row({0.1f, 2.0f, -1.0f, 1.5f});
  const Routing r = route(rc, 4, z);
  EXPECT_EQ(r.ids(0, 0), 1);
  EXPECT_EQ(r.ids(0, 1), 3);
  // renormalized softmax over the chosen two = softmax over their logits
  const double a = std::exp(2.0), b = std::exp(1.5);
  EXPECT_NEAR(r.weights(0, 0), a / (a + b), 1e-6);
  EXPECT_NEAR(r.weights(0, 1), b / (a + b), 1e-6);
}

TEST(Routing, SoftmaxTopkNotRenormalized) {
  RouterConfig rc;
  rc.top_k = 1;
  rc.renormalize = false;
  const Matrix z = row({0.0f, 1.0f, 0.0f});
  const Routing r = route(rc, 3, z);
  const double s = std::exp(1.0) / (std::exp(1.0) + 2.0);
  EXPECT_EQ(r.ids(0, 0), 1);
  EXPECT_NEAR(r.weights(0, 0), s, 1e-6);
}

TEST(Routing, TopkThenSoftmax) {
  RouterConfig rc;
  rc.method = RoutingMethod::topk_softmax;
  rc.top_k = 2;
  rc.renormalize = false;  // irrelevant for this method
  const Matrix z = row({3.0f, -2.0f, 1.0f, 2.5f});
  const Routing r = route(rc, 4, z);
  EXPECT_EQ(r.ids(0, 0), 0);
  EXPECT_EQ(r.ids(0, 1), 3);
  const double a = std::exp(3.0), b = std::exp(2.5);
  EXPECT_NEAR(r.weights(0, 0), a / (a + b), 1e-6);
  EXPECT_NEAR(r.weights(0, 1), b / (a + b), 1e-6);
}

TEST(Routing, SigmoidGroupedTopk) {
  // 8 experts, 4 groups of 2, keep 2 groups, top-3, correction bias steers the choice but the
  // weights are the unbiased sigmoids, renormalized, times the routed scaling factor.
  RouterConfig rc;
  rc.method = RoutingMethod::sigmoid_grouped_topk;
  rc.top_k = 3;
  rc.n_group = 4;
  rc.topk_group = 2;
  rc.routed_scaling_factor = 2.5f;
  rc.correction_bias = Vector::Zero(8);
  rc.correction_bias[6] = 5.0f;  // pulls group 3 in although its logits are low
  const Matrix z = row({2.0f, 1.9f, -3.0f, -3.0f, 1.0f, 0.5f, -4.0f, -4.5f});
  const Routing r = route(rc, 8, z);
  auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  // group scores (sum of top-2 biased): g0 = s(2)+s(1.9), g1 small, g2 = s(1)+s(.5), g3 = s(-4)+5+s(-4.5)
  // kept: g3 (largest) and g0; top-3 of biased choice within them: 6, 0, 1
  EXPECT_EQ(r.ids(0, 0), 6);
  EXPECT_EQ(r.ids(0, 1), 0);
  EXPECT_EQ(r.ids(0, 2), 1);
  const double w6 = sig(-4.0), w0 = sig(2.0), w1 = sig(1.9), sum = w6 + w0 + w1;
  EXPECT_NEAR(r.weights(0, 0), 2.5 * w6 / sum, 1e-6);
  EXPECT_NEAR(r.weights(0, 1), 2.5 * w0 / sum, 1e-6);
  EXPECT_NEAR(r.weights(0, 2), 2.5 * w1 / sum, 1e-6);
}

TEST(Routing, TiesGoToTheLowerIndex) {
  RouterConfig rc;
  rc.top_k = 2;
  const Matrix z = row({1.0f, 1.0f, 1.0f});
  const Routing r = route(rc, 3, z);
  EXPECT_EQ(r.ids(0, 0), 0);
  EXPECT_EQ(r.ids(0, 1), 1);
}

TEST(Routing, RejectsNonFiniteLogits) {
  RouterConfig rc;
  Matrix z = Matrix::Zero(3, 4);
  z(2, 1) = std::nanf("");
  try {
    (void)route(rc, 4, z);
    FAIL() << "no exception";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("polymoe: router_logits[2, 1] is not finite"), std::string::npos) << e.what();
  }
  z(2, 1) = INFINITY;
  EXPECT_THROW((void)route(rc, 4, z), error);
}

TEST(Routing, RejectsKGreaterThanE) {
  RouterConfig rc;
  rc.top_k = 5;
  EXPECT_THROW((void)route(rc, 4, Matrix::Zero(1, 4)), error);
}

TEST(Routing, EmptyBatch) {
  RouterConfig rc;
  const Routing r = route(rc, 4, Matrix::Zero(0, 4));
  EXPECT_EQ(r.ids.rows(), 0);
  EXPECT_EQ(r.ids.cols(), 2);
}
