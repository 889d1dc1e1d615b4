// Steady state: after a warm-up forward, MoeLayer::forward_into allocates nothing on the heap,
// counted by replacing the global allocation functions in this test program. Checked for the
// production kernel (tiled) with the local dispatcher; the reference and tbb_grouped kernels are
// oracles that allocate scratch per call by design.
#include <atomic>
#include <cstdlib>
#include <new>

#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include "test_util.hpp"

// Every heap allocation of the process is counted where it is made (malloc_hooks.hpp).
namespace {
std::atomic<long> allocations{0};
}
void polymoe_test_acquired(void*) { allocations.fetch_add(1, std::memory_order_relaxed); }
void polymoe_test_releasing(void*) {}
#include "malloc_hooks.hpp"

using namespace polymoe;

namespace {

template <class Q>
void no_allocation_after_warm_up(bool shared, Activation act) {
  std::mt19937 rng(11);
  MoeConfig cfg = test::moe_config(64, 48, 8, 2, act);
  cfg.shared_intermediate = shared ? 32 : 0;
  const MoeWeights w = test::random_weights(rng, cfg);
  MoeLayer<a2a::local, Q, kernel::tiled> layer(cfg, w);
  const Matrix hidden = test::random_matrix(rng, 40, 64), logits = test::random_matrix(rng, 40, 8);
  Matrix out(40, 64);
  layer.forward_into(hidden, logits, out);  // warm-up: buffers sized here
  layer.forward_into(hidden.topRows(7), logits.topRows(7), out.topRows(7));
  const long before = allocations.load();
  for (int i = 0; i < 3; ++i) {
    layer.forward_into(hidden, logits, out);
    layer.forward_into(hidden.topRows(7), logits.topRows(7), out.topRows(7));  // smaller batches reuse them
  }
  EXPECT_EQ(allocations.load() - before, 0) << Q::name << (shared ? " +shared" : "") << " " << to_string(act);
  // And the counter does count: a forward that returns a new matrix allocates.
  const long b2 = allocations.load();
  (void)layer.forward(hidden, logits);
  EXPECT_GT(allocations.load() - b2, 0);
}

TEST(SteadyState, TiledForwardAllocatesNothingAfterWarmUp) {
  tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
  no_allocation_after_warm_up<quant::fp32>(false, Activation::silu_gated);
  no_allocation_after_warm_up<quant::bf16>(true, Activation::silu_gated);
  no_allocation_after_warm_up<quant::fp32>(false, Activation::swiglu_oai);
}

}  // namespace
