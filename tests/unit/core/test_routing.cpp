// Routing against independent double-precision formulas written here from the peers' definitions.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

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

TEST(Routing, SigmoidGroupedTopkWithoutRenormalizationIsScaledSigmoid) {
  // renormalize = false: the weights are routed_scaling_factor * sigmoid(logit) of the chosen
  // experts, as they are (their sum is not 1, nor 2.5).
  RouterConfig rc;
  rc.method = RoutingMethod::sigmoid_grouped_topk;
  rc.top_k = 3;
  rc.n_group = 4;
  rc.topk_group = 2;
  rc.renormalize = false;
  rc.routed_scaling_factor = 2.5f;
  // sigmoids: .731 .378 | .881 .574 | .269 .119 | .690 .646
  // group scores (the two of each group): 1.109, 1.455, 0.388, 1.336 -> groups 1 and 3 kept;
  // top-3 within them: 2 (.881), 6 (.690), 7 (.646). Expert 0 (.731) is in a dropped group.
  const Matrix z = row({1.0f, -0.5f, 2.0f, 0.3f, -1.0f, -2.0f, 0.8f, 0.6f});
  const Routing r = route(rc, 8, z);
  ASSERT_EQ(r.ids.cols(), 3);
  EXPECT_EQ(r.ids(0, 0), 2);
  EXPECT_EQ(r.ids(0, 1), 6);
  EXPECT_EQ(r.ids(0, 2), 7);
  auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  EXPECT_NEAR(r.weights(0, 0), 2.5 * sig(2.0), 2e-6);
  EXPECT_NEAR(r.weights(0, 1), 2.5 * sig(0.8), 2e-6);
  EXPECT_NEAR(r.weights(0, 2), 2.5 * sig(0.6), 2e-6);
  EXPECT_NEAR(r.weights.sum(), 2.5 * (sig(2.0) + sig(0.8) + sig(0.6)), 5e-6);  // 5.54
}

TEST(Routing, SigmoidGroupedTopkScoresAGroupByItsTopTwo) {
  // Groups of 4; three rules of scoring a group pick three different groups here:
  //   group 0: the largest single score (.95)         max .95, top-2 1.00, all 1.10
  //   group 1: the largest sum of all four (2.40)     max .62, top-2 1.23, all 2.40
  //   group 2: the largest sum of its top two (1.60)  max .85, top-2 1.60, all 1.70
  // DeepSeek-V3 scores by the sum of the top two: group 2 is kept, and top-2 within it is 11, 9
  // (a max rule would give 1, then 0; a sum-of-all rule 4, 6).
  const double s[12] = {0.05, 0.95, 0.05, 0.05, 0.62, 0.58, 0.61, 0.59, 0.05, 0.75, 0.05, 0.85};
  Matrix z(1, 12);
  for (index_t e = 0; e < 12; ++e) z(0, e) = static_cast<float>(std::log(s[e] / (1.0 - s[e])));
  auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  // The construction, checked in double on the logits as they are: the three rules disagree.
  index_t by_max = -1, by_top2 = -1, by_all = -1;
  double best_max = -1.0, best_top2 = -1.0, best_all = -1.0;
  for (index_t g = 0; g < 3; ++g) {
    std::vector<double> v;
    for (index_t e = 4 * g; e < 4 * g + 4; ++e) v.push_back(sig(z(0, e)));
    std::sort(v.begin(), v.end(), std::greater<>());
    const double top2 = v[0] + v[1], all = v[0] + v[1] + v[2] + v[3];
    if (v[0] > best_max) best_max = v[0], by_max = g;
    if (top2 > best_top2) best_top2 = top2, by_top2 = g;
    if (all > best_all) best_all = all, by_all = g;
  }
  ASSERT_EQ(by_max, 0);
  ASSERT_EQ(by_all, 1);
  ASSERT_EQ(by_top2, 2);

  RouterConfig rc;
  rc.method = RoutingMethod::sigmoid_grouped_topk;
  rc.top_k = 2;
  rc.n_group = 3;
  rc.topk_group = 1;
  const Routing r = route(rc, 12, z);
  EXPECT_EQ(r.ids(0, 0), 11);
  EXPECT_EQ(r.ids(0, 1), 9);
  const double a = sig(z(0, 11)), b = sig(z(0, 9));  // renormalized
  EXPECT_NEAR(r.weights(0, 0), a / (a + b), 1e-6);
  EXPECT_NEAR(r.weights(0, 1), b / (a + b), 1e-6);
}

TEST(Routing, EqualLogitsPickTheLowerIndexFirst) {
  // Experts 1 and 4 tie for first place, 0 and 2 for third: 1, 4, 0 (routing.hpp, topk_indices).
  const Matrix z = row({1.0f, 3.0f, 1.0f, 0.0f, 3.0f});
  const double a = std::exp(3.0), b = std::exp(1.0), sum = 2 * a + b;
  RouterConfig rc;
  rc.top_k = 3;
  for (RoutingMethod m : {RoutingMethod::softmax_topk, RoutingMethod::topk_softmax}) {
    SCOPED_TRACE(m == RoutingMethod::softmax_topk ? "softmax_topk" : "topk_softmax");
    rc.method = m;
    const Routing r = route(rc, 5, z);
    EXPECT_EQ(r.ids(0, 0), 1);
    EXPECT_EQ(r.ids(0, 1), 4);
    EXPECT_EQ(r.ids(0, 2), 0);
    // both: softmax over the chosen logits (softmax_topk renormalized)
    EXPECT_EQ(r.weights(0, 0), r.weights(0, 1));
    EXPECT_NEAR(r.weights(0, 0), a / sum, 1e-6);
    EXPECT_NEAR(r.weights(0, 2), b / sum, 1e-6);
  }
}

TEST(Routing, SigmoidGroupedTopkEqualGroupScoresKeepTheLowerGroup) {
  auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  const double hi = sig(1.5), lo = sig(0.5);
  RouterConfig rc;
  rc.method = RoutingMethod::sigmoid_grouped_topk;
  rc.n_group = 4;  // groups of 2
  {
    // groups 1 {0.5, 1.5} and 3 {1.5, 0.5} score s(1.5) + s(0.5) exactly alike; groups 0 and 2
    // score less. One group kept: group 1, so experts 3, 2 (not 6, 7).
    rc.top_k = 2;
    rc.topk_group = 1;
    const Routing r = route(rc, 8, row({-1.0f, -2.0f, 0.5f, 1.5f, 0.0f, -3.0f, 1.5f, 0.5f}));
    EXPECT_EQ(r.ids(0, 0), 3);
    EXPECT_EQ(r.ids(0, 1), 2);
    EXPECT_NEAR(r.weights(0, 0), hi / (hi + lo), 1e-6);
    EXPECT_NEAR(r.weights(0, 1), lo / (hi + lo), 1e-6);
  }
  {
    // groups 0, 2 and 3 tie, two kept: 0 and 2; within them experts 1 and 4 tie (s(1.5)), then
    // 0 and 5 (s(0.5)): 1, 4, 0, 5 (group 3's 6 and 7 are out).
    rc.top_k = 4;
    rc.topk_group = 2;
    const Routing r = route(rc, 8, row({0.5f, 1.5f, -1.0f, -2.0f, 1.5f, 0.5f, 0.5f, 1.5f}));
    EXPECT_EQ(r.ids(0, 0), 1);
    EXPECT_EQ(r.ids(0, 1), 4);
    EXPECT_EQ(r.ids(0, 2), 0);
    EXPECT_EQ(r.ids(0, 3), 5);
    const double sum = 2 * (hi + lo);
    EXPECT_NEAR(r.weights(0, 0), hi / sum, 1e-6);
    EXPECT_NEAR(r.weights(0, 1), hi / sum, 1e-6);
    EXPECT_NEAR(r.weights(0, 2), lo / sum, 1e-6);
    EXPECT_NEAR(r.weights(0, 3), lo / sum, 1e-6);
  }
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

// ---- Property tests: random routers against an independent double-precision reference written from
// the upstream code (transformers 5.x DeepseekV3TopkRouter / MixtralTopKRouter / Qwen3MoeTopKRouter /
// GptOssTopKRouter, DeepSeek-V3's inference Gate): discarded groups masked with -inf, the
// renormalisation's 1e-20 (DeepSeek), the routed scaling factor after it. Tokens whose choice is
// decided by less than a margin (rounding territory) are skipped, and their number is bounded.
namespace {
struct RefRoute {
  std::vector<index_t> ids;  // the chosen experts, largest score first
  std::vector<double> w;
  double margin;             // the smallest gap that decided the choice
};

std::vector<index_t> ref_order(const std::vector<double>& v) {
  std::vector<index_t> o(v.size());
  std::iota(o.begin(), o.end(), index_t{0});
  std::stable_sort(o.begin(), o.end(), [&](index_t a, index_t b) { return v[a] > v[b]; });
  return o;
}

RefRoute ref_route(const RouterConfig& rc, const std::vector<double>& z) {
  const auto E = static_cast<index_t>(z.size());
  const index_t k = rc.top_k;
  RefRoute r;
  r.margin = 1e300;
  auto gap = [&](const std::vector<double>& v, const std::vector<index_t>& o, index_t n) {
    if (n < static_cast<index_t>(o.size()) && std::isfinite(v[o[n]])) r.margin = std::min(r.margin, v[o[n - 1]] - v[o[n]]);
  };
  if (rc.method == RoutingMethod::softmax_topk || rc.method == RoutingMethod::topk_softmax) {
    // softmax over all E then the k largest (renormalised: the same as softmax over the k logits)
    const double m = *std::max_element(z.begin(), z.end());
    std::vector<double> p(z.size());
    double sum = 0;
    for (index_t e = 0; e < E; ++e) sum += (p[e] = std::exp(z[e] - m));
    for (auto& x : p) x /= sum;
    const auto o = ref_order(z);
    gap(z, o, k);
    double ksum = 0;
    for (index_t j = 0; j < k; ++j) ksum += p[o[j]];
    const bool norm = rc.method == RoutingMethod::topk_softmax || rc.renormalize;
    for (index_t j = 0; j < k; ++j) {
      r.ids.push_back(o[j]);
      r.w.push_back(norm ? p[o[j]] / ksum : p[o[j]]);
    }
  } else {
    const index_t G = rc.n_group, per = E / G;
    std::vector<double> s(z.size()), choice(z.size()), gs(static_cast<std::size_t>(G));
    for (index_t e = 0; e < E; ++e) {
      s[e] = 1.0 / (1.0 + std::exp(-z[e]));
      choice[e] = s[e] + (rc.correction_bias.size() ? rc.correction_bias[e] : 0.0);
    }
    for (index_t g = 0; g < G; ++g) {
      std::vector<double> v(choice.begin() + g * per, choice.begin() + (g + 1) * per);
      std::sort(v.begin(), v.end(), std::greater<>());
      gs[g] = v[0] + v[1];
    }
    const auto go = ref_order(gs);
    gap(gs, go, rc.topk_group);
    std::vector<double> masked(z.size(), -std::numeric_limits<double>::infinity());
    for (index_t j = 0; j < rc.topk_group; ++j)
      for (index_t e = go[j] * per; e < (go[j] + 1) * per; ++e) masked[e] = choice[e];
    const auto o = ref_order(masked);
    gap(masked, o, k);
    double ksum = 0;
    for (index_t j = 0; j < k; ++j) ksum += s[o[j]];
    for (index_t j = 0; j < k; ++j) {
      r.ids.push_back(o[j]);
      r.w.push_back((rc.renormalize ? s[o[j]] / (ksum + 1e-20) : s[o[j]]) * rc.routed_scaling_factor);
    }
  }
  return r;
}

// Routes `tokens` random rows and checks each decisive one against ref_route; returns how many were checked.
int check_against_reference(const RouterConfig& rc, index_t E, std::mt19937& rng, float logit_scale, int tokens) {
  std::normal_distribution<float> nd(0.0f, logit_scale);
  Matrix z(tokens, E);
  for (index_t t = 0; t < tokens; ++t)
    for (index_t e = 0; e < E; ++e) z(t, e) = nd(rng);
  const Routing r = route(rc, E, z);
  int checked = 0;
  for (index_t t = 0; t < tokens; ++t) {
    std::vector<double> zd(static_cast<std::size_t>(E));
    for (index_t e = 0; e < E; ++e) zd[e] = z(t, e);
    const RefRoute ref = ref_route(rc, zd);
    if (ref.margin < 1e-5) continue;
    ++checked;
    for (index_t j = 0; j < rc.top_k; ++j) {
      EXPECT_EQ(r.ids(t, j), ref.ids[j]) << "token " << t << " slot " << j;
      EXPECT_NEAR(r.weights(t, j), ref.w[j], 1e-6 * std::max(1.0, std::abs(ref.w[j]))) << "token " << t << " slot " << j;
    }
  }
  return checked;
}
}  // namespace

TEST(RoutingProperty, SoftmaxMethodsMatchTheReference) {
  std::mt19937 rng(7);
  for (RoutingMethod m : {RoutingMethod::softmax_topk, RoutingMethod::topk_softmax})
    for (index_t E : {4, 16, 128})
      for (index_t k : {1, 2, 8})
        for (bool renorm : {true, false}) {
          if (k > E) continue;
          RouterConfig rc;
          rc.method = m;
          rc.top_k = k;
          rc.renormalize = renorm;
          SCOPED_TRACE(testing::Message() << "method " << static_cast<int>(m) << " E " << E << " k " << k);
          EXPECT_GE(check_against_reference(rc, E, rng, 2.0f, 64), 60);
        }
}

TEST(RoutingProperty, GroupedTopkMatchesTheReferenceWhateverTheBiasSign) {
  // Correction biases all negative (choice scores of every expert below 0), mixed, and positive;
  // groups of 2, 4 and 8; scaling factor applied once after the renormalisation.
  std::mt19937 rng(11);
  struct Shape { index_t E, G, kg, k; };
  for (const Shape sh : {Shape{8, 4, 2, 3}, Shape{8, 4, 1, 2}, Shape{16, 4, 2, 4}, Shape{64, 8, 4, 8}, Shape{256, 8, 4, 8},
                         Shape{32, 4, 4, 6}})
    for (float bias_center : {-1.5f, -0.5f, 0.0f, 0.8f})
      for (bool renorm : {true, false}) {
        RouterConfig rc;
        rc.method = RoutingMethod::sigmoid_grouped_topk;
        rc.top_k = sh.k;
        rc.n_group = sh.G;
        rc.topk_group = sh.kg;
        rc.renormalize = renorm;
        rc.routed_scaling_factor = 2.5f;
        std::uniform_real_distribution<float> ud(bias_center - 0.3f, bias_center + 0.3f);
        rc.correction_bias.resize(sh.E);
        for (index_t e = 0; e < sh.E; ++e) rc.correction_bias[e] = ud(rng);
        SCOPED_TRACE(testing::Message() << "E " << sh.E << " groups " << sh.G << " kept " << sh.kg << " k " << sh.k
                                        << " bias ~ " << bias_center << " renormalize " << renorm);
        EXPECT_GE(check_against_reference(rc, sh.E, rng, 1.5f, 64), 56);
      }
}

TEST(RoutingProperty, NegativeChoiceScoresNeverPickADiscardedGroup) {
  // The failure a 0.0 mask causes, stated directly: every chosen expert lies in a kept group, and the
  // kept groups are the topk_group best by their top-2 sums, even when every choice score is < 0.
  RouterConfig rc;
  rc.method = RoutingMethod::sigmoid_grouped_topk;
  rc.top_k = 4;
  rc.n_group = 4;
  rc.topk_group = 2;
  rc.correction_bias = Vector::Constant(16, -2.0f);  // sigmoid < 1: every choice score is negative
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  Matrix z(256, 16);
  for (index_t t = 0; t < z.rows(); ++t)
    for (index_t e = 0; e < 16; ++e) z(t, e) = nd(rng);
  const Routing r = route(rc, 16, z);
  for (index_t t = 0; t < z.rows(); ++t) {
    std::vector<double> gs(4);
    for (index_t g = 0; g < 4; ++g) {
      std::vector<double> v;
      for (index_t e = 4 * g; e < 4 * g + 4; ++e) v.push_back(1.0 / (1.0 + std::exp(-double(z(t, e)))) - 2.0);
      std::sort(v.begin(), v.end(), std::greater<>());
      gs[g] = v[0] + v[1];
    }
    const auto go = ref_order(gs);
    for (index_t j = 0; j < 4; ++j) {
      const index_t g = r.ids(t, j) / 4;
      EXPECT_TRUE(g == go[0] || g == go[1]) << "token " << t << " routed to expert " << r.ids(t, j) << " of group " << g
                                            << ", kept groups " << go[0] << " and " << go[1];
    }
  }
}
