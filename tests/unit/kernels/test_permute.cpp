// The format adapters (pre-/post-permute) against the kernels run on the native format.
#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace polymoe;

namespace {

struct Problem {
  MoeConfig cfg;
  MoeWeights w;
  Matrix hidden;
  Routing r;
};

Problem make(unsigned seed, index_t T, index_t E, index_t k) {
  std::mt19937 rng(seed);
  Problem p;
  p.cfg.hidden = 12;
  p.cfg.intermediate = 7;
  p.cfg.num_experts = E;
  p.cfg.router.top_k = k;
  p.w = test::random_weights(rng, p.cfg);
  p.hidden = test::random_matrix(rng, T, 12);
  p.r = test::random_routing(rng, T, E, k);
  return p;
}

TEST(Permute, StandardThroughMaskedEqualsStandard) {
  const Problem p = make(3, 23, 6, 3);
  const auto qw = quant::fp32::quantize(p.w.experts);
  const ExpertMlp mlp{ActivationParams{}, false};
  const kernel::reference k;
  DispatchOutput<format::standard> d{p.hidden, p.r.ids, p.r.weights, 6};
  Matrix want(23, 12), got(23, 12);
  k.run<quant::fp32>(d, qw, mlp, CombineInput<format::standard>{want});

  kernels::adapter<format::standard, format::masked> a;
  CombineInput<format::standard> c{got};
  auto d2 = a.pre(d, mlp);
  EXPECT_EQ(d2.num_experts, 6);
  index_t total = 0;
  for (index_t m : d2.masked_m) total += m;
  EXPECT_EQ(total, 23 * 3);
  auto c2 = a.output(c, d2);
  k.run<quant::fp32>(d2, qw, mlp, c2);
  a.post(d, mlp, c2, c);
  EXPECT_LE(test::relative_error(got, want), 1e-6);
}

TEST(Permute, MaskedThroughStandardEqualsMasked) {
  // A masked batch (3 experts, capacity 5, partly filled) run natively by the reference and through
  // the masked->standard adapter by the grouped kernel.
  std::mt19937 rng(4);
  MoeConfig cfg;
  cfg.hidden = 10;
  cfg.intermediate = 6;
  cfg.num_experts = 3;
  const MoeWeights w = test::random_weights(rng, cfg);
  const auto qw = quant::fp32::quantize(w.experts);
  const std::vector<index_t> m = {5, 0, 2};
  const Matrix buf = test::random_matrix(rng, 15, 10);
  DispatchOutput<format::masked> d{buf, m, 5, 3};
  const ExpertMlp mlp{ActivationParams{}, false};
  Matrix want = Matrix::Zero(15, 10), got = Matrix::Zero(15, 10);
  kernel::reference{}.run<quant::fp32>(d, qw, mlp, CombineInput<format::masked>{want});

  const auto prepared = kernel::tbb_grouped::prepare<quant::fp32>(qw);
  kernels::adapter<format::masked, format::standard> a;
  CombineInput<format::masked> c{got};
  auto d2 = a.pre(d, mlp);
  auto c2 = a.output(c, d2);
  kernel::tbb_grouped{}.run<quant::fp32>(d2, prepared, mlp, c2);
  a.post(d, mlp, c2, c);
  for (index_t e = 0; e < 3; ++e)
    for (index_t r = 0; r < m[e]; ++r)
      EXPECT_LE((got.row(e * 5 + r) - want.row(e * 5 + r)).cwiseAbs().maxCoeff(), 1e-5f) << e << "," << r;
  EXPECT_GT(want.cwiseAbs().maxCoeff(), 0.0f);
}

}  // namespace
