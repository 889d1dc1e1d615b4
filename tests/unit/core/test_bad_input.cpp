// Bad input: a polymoe::error naming what is wrong, never an abort.
#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace polymoe;

namespace {

MoeConfig small_config() {
  MoeConfig cfg;
  cfg.hidden = 8;
  cfg.intermediate = 4;
  cfg.num_experts = 4;
  cfg.router.top_k = 2;
  return cfg;
}

template <class F>
void expect_error(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no polymoe::error; expected one containing '" << fragment << "'";
  } catch (const error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("polymoe: ", 0), 0u) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << "message: " << what << "\nexpected fragment: " << fragment;
  }
}

using Layer = MoeLayer<a2a::local, quant::fp32, kernel::tbb_grouped>;

struct BadInput : ::testing::Test {
  std::mt19937 rng{1};
  MoeConfig cfg = small_config();
  MoeWeights w = test::random_weights(rng, cfg);
};

TEST_F(BadInput, HiddenWithWrongWidth) {
  Layer layer(cfg, w);
  expect_error([&] { (void)layer.forward(Matrix::Zero(3, 7), Matrix::Zero(3, 4)); }, "hidden has 7 columns");
}

TEST_F(BadInput, LogitsWithWrongShape) {
  Layer layer(cfg, w);
  expect_error([&] { (void)layer.forward(Matrix::Zero(3, 8), Matrix::Zero(3, 5)); }, "router_logits has 5 columns");
  expect_error([&] { (void)layer.forward(Matrix::Zero(3, 8), Matrix::Zero(2, 4)); }, "router_logits has 2 rows");
}

TEST_F(BadInput, NonFiniteLogits) {
  Layer layer(cfg, w);
  Matrix logits = Matrix::Zero(3, 4);
  logits(1, 3) = std::numeric_limits<float>::infinity();
  expect_error([&] { (void)layer.forward(Matrix::Zero(3, 8), logits); }, "router_logits[1, 3] is not finite");
}

TEST_F(BadInput, ExpertIdOutOfRange) {
  Layer layer(cfg, w);
  IdMatrix ids(2, 2);
  ids << 0, 1, 2, 4;
  expect_error([&] { (void)layer.forward_routed(Matrix::Zero(2, 8), ids, Matrix::Ones(2, 2)); },
               "topk_ids[1, 1] = 4 is outside [0, num_experts=4)");
  ids(1, 1) = -1;
  expect_error([&] { (void)layer.forward_routed(Matrix::Zero(2, 8), ids, Matrix::Ones(2, 2)); },
               "topk_ids[1, 1] = -1");
}

TEST_F(BadInput, DuplicateExpertInOneToken) {
  Layer layer(cfg, w);
  IdMatrix ids(1, 2);
  ids << 3, 3;
  expect_error([&] { (void)layer.forward_routed(Matrix::Zero(1, 8), ids, Matrix::Ones(1, 2)); },
               "lists expert 3 twice");
}

TEST_F(BadInput, RoutingShapesDisagree) {
  Layer layer(cfg, w);
  expect_error([&] { (void)layer.forward_routed(Matrix::Zero(2, 8), IdMatrix::Zero(2, 2), Matrix::Ones(2, 3)); },
               "topk_weights has 3");
  expect_error([&] { (void)layer.forward_routed(Matrix::Zero(2, 8), IdMatrix::Zero(3, 2), Matrix::Ones(3, 2)); },
               "topk_ids has 3 rows");
}

TEST_F(BadInput, NonFiniteRoutingWeight) {
  Layer layer(cfg, w);
  IdMatrix ids(1, 2);
  ids << 0, 1;
  Matrix wt = Matrix::Ones(1, 2);
  wt(0, 1) = std::nanf("");
  expect_error([&] { (void)layer.forward_routed(Matrix::Zero(1, 8), ids, wt); }, "topk_weights[0, 1] is not finite");
}

TEST_F(BadInput, TopKGreaterThanE) {
  cfg.router.top_k = 5;
  expect_error([&] { Layer layer(cfg, w); }, "top_k must be in [1, num_experts=4], got 5");
  cfg.router.top_k = 2;
  Layer layer(cfg, w);
  expect_error([&] { (void)layer.forward_routed(Matrix::Zero(1, 8), IdMatrix::Zero(1, 5), Matrix::Ones(1, 5)); },
               "top-k width 5");
}

TEST_F(BadInput, ActivationNeedsBiases) {
  cfg.activation = Activation::swiglu_oai;
  expect_error([&] { Layer layer(cfg, w); }, "swiglu_oai needs expert biases");
  cfg.expert_bias = true;  // config says biases, weights have none
  expect_error([&] { Layer layer(cfg, w); }, "MoeWeights.experts has shape");
}

TEST_F(BadInput, WeightsOfTheWrongShape) {
  w.experts.w2.conservativeResize(w.experts.w2.rows() - 1, Eigen::NoChange);
  expect_error([&] { Layer layer(cfg, w); }, "w2 is [31, 4], expected [32, 4]");
}

TEST_F(BadInput, SharedExpertMissingOrUnexpected) {
  cfg.shared_intermediate = 6;
  expect_error([&] { Layer layer(cfg, w); }, "MoeWeights.shared is empty");
  cfg.shared_intermediate = 0;
  w.shared = test::random_experts(rng, ExpertShape{1, 8, 6, true, false});
  expect_error([&] { Layer layer(cfg, w); }, "shared_intermediate is 0");
}

TEST_F(BadInput, LocalDispatcherWithExpertParallelism) {
  cfg.ep_size = 2;
  cfg.ep_rank = 0;
  w = test::random_weights(rng, cfg);
  expect_error([&] { Layer layer(cfg, w); }, "a2a::local runs on one rank");
}

TEST_F(BadInput, ForwardWithoutRouterWeight) {
  Layer layer(cfg, w);
  expect_error([&] { (void)layer.forward(Matrix::Zero(1, 8)); }, "no router weight");
}

TEST_F(BadInput, EmptyBatchGivesEmptyResult) {
  Layer layer(cfg, w);
  const Matrix out = layer.forward(Matrix::Zero(0, 8), Matrix::Zero(0, 4));
  EXPECT_EQ(out.rows(), 0);
  EXPECT_EQ(out.cols(), 8);
}

TEST_F(BadInput, BadConfigFields) {
  MoeConfig c = small_config();
  c.hidden = 0;
  expect_error([&] { c.validate(); }, "MoeConfig.hidden must be > 0");
  c = small_config();
  c.router.method = RoutingMethod::sigmoid_grouped_topk;
  c.router.n_group = 3;
  expect_error([&] { c.validate(); }, "n_group=3 must divide num_experts=4");
  c = small_config();
  c.router_weight_on_input = true;
  expect_error([&] { c.validate(); }, "router_weight_on_input needs top_k == 1");
}

}  // namespace
