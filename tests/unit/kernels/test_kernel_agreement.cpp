// Property tests: every valid triple agrees with the reference kernel (same dispatcher, same
// scheme) on random shapes, including the degenerate ones.
#include <cmath>
#include <random>

#include <boost/mp11/algorithm.hpp>
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include "test_util.hpp"

using namespace polymoe;
namespace mp = boost::mp11;

namespace {

struct Shape {
  index_t T, H, I, E, k;
  Activation act;
  bool bias, shared, skewed;
  float input_scale = 1.0f;  // the hidden states' standard deviation
};

std::vector<Shape> shapes() {
  std::vector<Shape> v = {
      {0, 16, 8, 4, 2, Activation::silu_gated, false, false, false},    // empty batch
      {1, 16, 8, 4, 1, Activation::silu_gated, false, false, false},    // one token, k = 1
      {7, 24, 10, 5, 3, Activation::gelu_gated, false, true, false},    // odd sizes, shared expert
      {33, 32, 12, 9, 8, Activation::swiglu_oai, true, false, false},   // k = 8, biases
      {17, 20, 6, 3, 3, Activation::relu2, false, false, false},        // k = E, non-gated
      {65, 16, 9, 7, 2, Activation::silu, true, false, true},           // all tokens on one expert
      {130, 40, 24, 13, 4, Activation::silu_gated, false, true, false}, // E not a multiple of threads
      {40, 32, 12, 6, 2, Activation::swiglu_oai, true, false, false, 12.0f},  // GPT-OSS's clamp at work
  };
  std::mt19937 rng(1234);
  const Activation acts[] = {Activation::silu_gated, Activation::gelu_gated, Activation::swiglu_oai, Activation::silu,
                             Activation::relu2};
  for (int i = 0; i < 12; ++i) {
    Shape s;
    s.E = 1 + static_cast<index_t>(rng() % 11);
    s.k = 1 + static_cast<index_t>(rng() % std::min<index_t>(8, s.E));
    s.T = static_cast<index_t>(rng() % 70);
    s.H = 1 + static_cast<index_t>(rng() % 48);
    s.I = 1 + static_cast<index_t>(rng() % 40);
    s.act = acts[rng() % 5];
    s.bias = s.act == Activation::swiglu_oai || rng() % 2;
    s.shared = rng() % 3 == 0;
    s.skewed = rng() % 4 == 0;
    v.push_back(s);
  }
  return v;
}

MoeConfig config_for(const Shape& s) {
  MoeConfig cfg;
  cfg.hidden = s.H;
  cfg.intermediate = s.I;
  cfg.num_experts = s.E;
  cfg.router.top_k = s.k;
  cfg.activation = s.act;
  cfg.expert_bias = s.bias;
  cfg.shared_intermediate = s.shared ? s.I + 3 : 0;
  return cfg;
}

Routing routing_for(std::mt19937& rng, const Shape& s) {
  Routing r = test::random_routing(rng, s.T, s.E, s.k);
  if (s.skewed)  // slot 0 of every token on expert E-1; the other slots avoid it
    for (index_t t = 0; t < s.T; ++t) {
      for (index_t j = 0; j < s.k; ++j)
        if (r.ids(t, j) == s.E - 1) std::swap(r.ids(t, j), r.ids(t, 0));
      r.ids(t, 0) = static_cast<std::int32_t>(s.E - 1);
    }
  return r;
}

template <class A, class Q, class K>
void check_against_reference(const Shape& s, unsigned seed) {
  std::mt19937 rng(seed);
  const MoeConfig cfg = config_for(s);
  const MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, s.T, s.H, s.input_scale);
  const Routing r = routing_for(rng, s);
  MoeLayer<A, Q, kernel::reference> ref(cfg, w);
  MoeLayer<A, Q, K> layer(cfg, w, {}, test::make_kernel<K>());
  const Matrix want = ref.forward_routed(hidden, r.ids, r.weights);
  const Matrix got = layer.forward_routed(hidden, r.ids, r.weights);
  ASSERT_EQ(got.rows(), s.T);
  ASSERT_EQ(got.cols(), s.H);
  if (s.T == 0) return;
  EXPECT_LE(test::kernel_agreement_error<Q>(got, want), test::kernel_tolerance<Q>)
      << "T=" << s.T << " H=" << s.H << " I=" << s.I << " E=" << s.E << " k=" << s.k << " act=" << to_string(s.act);
  // Repeated runs give the same bits.
  EXPECT_TRUE((layer.forward_routed(hidden, r.ids, r.weights).array() == got.array()).all());
}

TEST(KernelAgreement, EveryValidTripleMatchesTheReference) {
  int checked = 0;
  for (const Shape& s : shapes())
    mp::mp_for_each<valid_triples>([&]<class A, class Q, class K>(mp::mp_list<A, Q, K>) {
      SCOPED_TRACE((test::triple_name<A, Q, K>()));
      check_against_reference<A, Q, K>(s, 7u + static_cast<unsigned>(checked));
      ++checked;
    });
  EXPECT_GT(checked, 0);
}

TEST(KernelAgreement, SwigluClampShapeDrivesPreActivationsPastTheLimit) {
  // The clamp case of shapes() is only a test of the clamp if its gate and up values cross +-7
  // (with unit inputs they stay within about +-4.5, as in the GPT-OSS fixtures); and the
  // reference, the oracle of that case, follows DESIGN.md's formula there (worked in double).
  const Shape s = shapes()[7];
  ASSERT_EQ(s.act, Activation::swiglu_oai);
  std::mt19937 rng(11);
  const MoeConfig cfg = config_for(s);
  const MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, s.T, s.H, s.input_scale);
  const Routing r = routing_for(rng, s);
  int gate_over = 0, up_over = 0, up_under = 0;
  Eigen::MatrixXd want = Eigen::MatrixXd::Zero(s.T, s.H);
  for (index_t t = 0; t < s.T; ++t)
    for (index_t j = 0; j < s.k; ++j) {
      const index_t e = r.ids(t, j);
      const Eigen::VectorXd x = hidden.row(t).transpose().cast<double>();
      const Eigen::VectorXd pre = w.experts.w13_of(e).cast<double>() * x + w.experts.b13.row(e).transpose().cast<double>();
      Eigen::VectorXd h(s.I);
      for (index_t i = 0; i < s.I; ++i) {
        const double g = std::min(pre[i], 7.0), u = std::clamp(pre[s.I + i], -7.0, 7.0);
        gate_over += pre[i] > 7.0;
        up_over += pre[s.I + i] > 7.0;
        up_under += pre[s.I + i] < -7.0;
        h[i] = g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
      }
      const Eigen::VectorXd y = w.experts.w2_of(e).cast<double>() * h + w.experts.b2.row(e).transpose().cast<double>();
      want.row(t) += r.weights(t, j) * y.transpose();
    }
  EXPECT_GT(gate_over, 20);
  EXPECT_GT(up_over, 20);
  EXPECT_GT(up_under, 20);
  MoeLayer<a2a::local, quant::fp32, kernel::reference> ref(cfg, w);
  const Matrix got = ref.forward_routed(hidden, r.ids, r.weights);
  EXPECT_LE(test::relative_error(got, want.cast<float>()), 1e-5);
}

TEST(KernelAgreement, SharedExpertGateMatchesTheFormula) {
  // Qwen2-MoE: out = sum_j w_j * W2_e . silu_gated(W13_e . x) + sigmoid(x . g) * W2_s . silu_gated(W13_s . x),
  // worked in double here; the fp32 reference layer must match it, and every valid triple the
  // reference kernel on its own scheme.
  const Shape s{20, 24, 10, 5, 2, Activation::silu_gated, false, true, false};
  std::mt19937 rng(21);
  MoeConfig cfg = config_for(s);  // shared expert of intermediate I + 3
  cfg.shared_expert_gate = true;
  MoeWeights w = test::random_weights(rng, cfg);
  ASSERT_TRUE(w.shared.has_value());
  ASSERT_EQ(w.shared_gate.rows(), 1);
  ASSERT_EQ(w.shared_gate.cols(), s.H);
  w.shared_gate /= std::sqrt(static_cast<float>(s.H));  // x . g ~ N(0, 1): gates spread over (0, 1)
  const Matrix hidden = test::random_matrix(rng, s.T, s.H);
  const Routing r = routing_for(rng, s);

  auto mlp = [](const Eigen::MatrixXd& w13, const Eigen::MatrixXd& w2, const Eigen::VectorXd& x) {
    const index_t inter = w13.rows() / 2;
    const Eigen::VectorXd pre = w13 * x;
    Eigen::VectorXd h(inter);
    for (index_t i = 0; i < inter; ++i) h[i] = pre[i] / (1.0 + std::exp(-pre[i])) * pre[inter + i];
    return Eigen::VectorXd(w2 * h);
  };
  const Eigen::MatrixXd s13 = w.shared->w13_of(0).cast<double>(), s2 = w.shared->w2_of(0).cast<double>();
  ASSERT_EQ(s13.rows(), 2 * cfg.shared_intermediate);
  const Eigen::VectorXd g = w.shared_gate.row(0).transpose().cast<double>();
  Eigen::MatrixXd routed = Eigen::MatrixXd::Zero(s.T, s.H), shared = Eigen::MatrixXd::Zero(s.T, s.H);
  Eigen::VectorXd gate(s.T);
  for (index_t t = 0; t < s.T; ++t) {
    const Eigen::VectorXd x = hidden.row(t).transpose().cast<double>();
    for (index_t j = 0; j < s.k; ++j) {
      const index_t e = r.ids(t, j);
      const Eigen::MatrixXd e13 = w.experts.w13_of(e).cast<double>(), e2 = w.experts.w2_of(e).cast<double>();
      routed.row(t) += static_cast<double>(r.weights(t, j)) * mlp(e13, e2, x).transpose();
    }
    gate[t] = 1.0 / (1.0 + std::exp(-g.dot(x)));
    shared.row(t) = mlp(s13, s2, x).transpose();
  }
  EXPECT_LT(gate.minCoeff(), 0.4);  // neither all open nor all shut
  EXPECT_GT(gate.maxCoeff(), 0.6);
  const Matrix want = (routed + gate.asDiagonal() * shared).cast<float>();
  const Matrix ungated = (routed + shared).cast<float>();

  MoeLayer<a2a::local, quant::fp32, kernel::reference> ref(cfg, w);
  const Matrix got = ref.forward_routed(hidden, r.ids, r.weights);
  ASSERT_EQ(got.rows(), s.T);
  ASSERT_EQ(got.cols(), s.H);
  EXPECT_LE(test::relative_error(got, want), 1e-5);
  // The gate matters: without it the formula is far off the layer.
  EXPECT_GT(test::relative_error(got, ungated), 1e3 * test::kernel_tolerance<quant::fp32>);

  int checked = 0;
  mp::mp_for_each<valid_triples>([&]<class A, class Q, class K>(mp::mp_list<A, Q, K>) {
    SCOPED_TRACE((test::triple_name<A, Q, K>()));
    MoeLayer<A, Q, kernel::reference> reference(cfg, w);
    MoeLayer<A, Q, K> layer(cfg, w, {}, test::make_kernel<K>());
    const Matrix expected = reference.forward_routed(hidden, r.ids, r.weights);
    const Matrix out = layer.forward_routed(hidden, r.ids, r.weights);
    ASSERT_EQ(out.rows(), s.T);
    ASSERT_EQ(out.cols(), s.H);
    EXPECT_LE(test::kernel_agreement_error<Q>(out, expected), test::kernel_tolerance<Q>);
    ++checked;
  });
  EXPECT_GT(checked, 0);
}

TEST(KernelAgreement, ResultDoesNotDependOnThreadCount) {
  const Shape s{97, 32, 16, 11, 3, Activation::silu_gated, true, true, false};
  std::mt19937 rng(99);
  const MoeConfig cfg = config_for(s);
  const MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, s.T, s.H);
  const Routing r = routing_for(rng, s);
  mp::mp_for_each<valid_triples>([&]<class A, class Q, class K>(mp::mp_list<A, Q, K>) {
    SCOPED_TRACE((test::triple_name<A, Q, K>()));
    MoeLayer<A, Q, K> layer(cfg, w, {}, test::make_kernel<K>());
    Matrix first;
    for (int threads : {1, 2, 3, 7, 16}) {
      tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
      const Matrix out = layer.forward_routed(hidden, r.ids, r.weights);
      if (first.size() == 0)
        first = out;
      else
        EXPECT_TRUE((out.array() == first.array()).all()) << threads << " threads";
    }
  });
}

TEST(KernelAgreement, ReferenceDetectsAWrongKernel) {
  // The agreement check can fail: perturbing the weights of one layer only is caught.
  const Shape s{9, 16, 8, 4, 2, Activation::silu_gated, false, false, false};
  std::mt19937 rng(5);
  const MoeConfig cfg = config_for(s);
  MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, s.T, s.H);
  const Routing r = routing_for(rng, s);
  MoeLayer<a2a::local, quant::fp32, kernel::reference> ref(cfg, w);
  w.experts.w13(3, 2) += 0.5f;
  MoeLayer<a2a::local, quant::fp32, kernel::tbb_grouped> other(cfg, w);
  EXPECT_GT(test::relative_error(other.forward_routed(hidden, r.ids, r.weights),
                                 ref.forward_routed(hidden, r.ids, r.weights)),
            test::kernel_tolerance<quant::fp32>);
}

TEST(KernelAgreement, WeightOnInputTopOne) {
  // Llama-4 style: the routing weight scales the input; with a linear (non-gated relu2 is not
  // linear, so compare the reference against the direct formula) the result differs from output weighting.
  const Shape s{11, 12, 8, 4, 1, Activation::silu_gated, false, false, false};
  std::mt19937 rng(8);
  MoeConfig cfg = config_for(s);
  cfg.router_weight_on_input = true;
  const MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, s.T, s.H);
  const Routing r = routing_for(rng, s);
  MoeLayer<a2a::local, quant::fp32, kernel::reference> ref(cfg, w);
  MoeLayer<a2a::local, quant::fp32, kernel::tbb_grouped> tbbk(cfg, w);
  const Matrix want = ref.forward_routed(hidden, r.ids, r.weights);
  EXPECT_LE(test::relative_error(tbbk.forward_routed(hidden, r.ids, r.weights), want), 2e-5);
  // direct formula for token 0
  const index_t e = r.ids(0, 0);
  const Eigen::RowVectorXf x = hidden.row(0) * r.weights(0, 0);
  const Eigen::VectorXf g = w.experts.w13_of(e).topRows(s.I) * x.transpose();
  const Eigen::VectorXf u = w.experts.w13_of(e).bottomRows(s.I) * x.transpose();
  Eigen::VectorXf h(s.I);
  for (index_t j = 0; j < s.I; ++j) h[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
  const Eigen::VectorXf y = w.experts.w2_of(e) * h;
  EXPECT_LE((want.row(0).transpose() - y).cwiseAbs().maxCoeff(), 1e-5f * (1 + y.cwiseAbs().maxCoeff()));
}

}  // namespace
