// Every valid triple against the Hugging Face transformers results in ../shared/fixtures/hf and
// tests/data/hf.
#include <cmath>
#include <cstring>

#include <boost/mp11/algorithm.hpp>
#include <gtest/gtest.h>

#include "hf_fixture.hpp"
#include "test_util.hpp"

using namespace polymoe;
namespace mp = boost::mp11;

namespace {

class HfFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFixture, EveryValidTripleMatchesTransformers) {
  const test::HfCase hc = test::load_hf_case(GetParam());
  mp::mp_for_each<valid_triples>([&]<class A, class Q, class K>(mp::mp_list<A, Q, K>) {
    SCOPED_TRACE((test::triple_name<A, Q, K>()));
    MoeLayer<A, Q, K> layer(hc.cfg, hc.weights, {}, test::make_kernel<K>());
    const Matrix out = layer.forward(hc.hidden, hc.router_logits);
    const double err = test::relative_error(out, hc.expected);
    EXPECT_LE(err, test::fixture_tolerance<Q>) << GetParam() << " " << test::triple_name<A, Q, K>();
    // The layer's own router (weight and bias from the checkpoint) reproduces the logits' routing.
    const Matrix out2 = layer.forward(hc.hidden);
    EXPECT_LE(test::relative_error(out2, hc.expected), test::fixture_tolerance<Q>);
    // and writing into the caller's rows, bitwise the same
    EXPECT_TRUE(layer.has_router());
    Matrix out3 = Matrix::Constant(out2.rows(), out2.cols(), std::nanf(""));
    layer.forward_into(hc.hidden, out3);
    EXPECT_EQ(0, std::memcmp(out3.data(), out2.data(), sizeof(float) * static_cast<std::size_t>(out2.size())));
  });
}

TEST_P(HfFixture, OracleIsNotTrivial) {
  // The comparison above can fail: a layer with one expert's weights perturbed misses the fixture.
  test::HfCase hc = test::load_hf_case(GetParam());
  hc.weights.experts.w2 *= 1.01f;
  MoeLayer<a2a::local, quant::fp32, kernel::reference> layer(hc.cfg, hc.weights);
  EXPECT_GT(test::relative_error(layer.forward(hc.hidden, hc.router_logits), hc.expected), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Families, HfFixture, ::testing::Values("mixtral", "qwen3_moe", "deepseek_v3", "gpt_oss"));
// DeepSeek-V3 with a correction bias that drives choice scores negative (groups of 4 and of 2):
// the experts of discarded groups must stay out (transformers 5.x masks them with -inf).
INSTANTIATE_TEST_SUITE_P(NegativeChoiceScores, HfFixture,
                         ::testing::Values("deepseek_v3_negbias", "deepseek_v3_negbias_g2"));

}  // namespace
