// Batch invariance of the shared expert: a token's shared-expert output is the same bits whatever
// other tokens share its batch. Expert parallelism runs the shared expert on each rank's own tokens,
// so this is what makes a rank's rows bitwise equal to one process running all tokens (the MPI
// tests check that end to end; this checks the kernels on their own, without MPI). The routed
// experts are zero here, so the output is the shared expert alone; every valid triple, under the
// tuning the program was given (the device check runs it with every block on the AMX tiles too).
#include <cstring>
#include <random>

#include <boost/mp11/algorithm.hpp>
#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace polymoe;
namespace mp = boost::mp11;

namespace {

struct Shape {
  index_t H, I;
  Activation act;
  bool gate;
};

template <class A, class Q, class K>
int check_shape(const Shape& s, unsigned seed) {
  std::mt19937 rng(seed);
  MoeConfig cfg;
  cfg.hidden = s.H;
  cfg.intermediate = 8;
  cfg.num_experts = 4;
  cfg.router.top_k = 2;
  cfg.activation = s.act;
  cfg.shared_intermediate = s.I;
  cfg.shared_expert_gate = s.gate;
  MoeWeights w = test::random_weights(rng, cfg);
  w.experts.w13.setZero();
  w.experts.w2.setZero();
  if (s.gate) w.shared_gate /= std::sqrt(static_cast<float>(s.H));
  const index_t T = 70;
  const Matrix hidden = test::random_matrix(rng, T, s.H);
  const Matrix logits = test::random_matrix(rng, T, cfg.num_experts);
  MoeLayer<A, Q, K> layer(cfg, w, {}, test::make_kernel<K>());
  const Matrix all = layer.forward(hidden, logits);
  int differing = 0;
  for (const index_t n : {1, 2, 3, 5, 8, 15, 16, 17, 31, 33, 64})
    for (const index_t first : {index_t{0}, index_t{3}, T - n}) {
      const Matrix part = layer.forward(hidden.middleRows(first, n), logits.middleRows(first, n));
      const Matrix want = all.middleRows(first, n);
      if (std::memcmp(part.data(), want.data(), sizeof(float) * static_cast<std::size_t>(part.size())) != 0) {
        ++differing;
        ADD_FAILURE() << "rows [" << first << ", " << first + n << ") of " << T << " differ from the same rows run alone"
                      << " (H=" << s.H << " I=" << s.I << " act=" << to_string(s.act) << ", relative error "
                      << test::relative_error(part, want) << ")";
      }
    }
  return differing;
}

TEST(BatchInvariance, SharedExpertRowsDoNotDependOnTheirBatch) {
  const Shape shapes[] = {
      {64, 48, Activation::silu_gated, false},
      {300, 40, Activation::silu_gated, true},   // hidden over two groups of 128
      {24, 10, Activation::gelu_gated, false},   // small and odd
      {128, 96, Activation::relu2, false},       // not gated
  };
  int checked = 0;
  for (const Shape& s : shapes)
    mp::mp_for_each<valid_triples>([&]<class A, class Q, class K>(mp::mp_list<A, Q, K>) {
      SCOPED_TRACE((test::triple_name<A, Q, K>()));
      check_shape<A, Q, K>(s, 31u + static_cast<unsigned>(checked));
      ++checked;
    });
  EXPECT_GT(checked, 0);
}

}  // namespace
