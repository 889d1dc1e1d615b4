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

// Every heap allocation of the process goes through malloc and friends (operator new, Eigen's
// aligned allocator, TBB), so the count is taken there, on top of glibc's own entry points.
namespace {
std::atomic<long> allocations{0};
}
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);

void* malloc(std::size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t m) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(n, m);
}
void* realloc(void* p, std::size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, n);
}
void* memalign(std::size_t a, std::size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(a, n);
}
void* aligned_alloc(std::size_t a, std::size_t n) { return memalign(a, n); }
int posix_memalign(void** p, std::size_t a, std::size_t n) {
  *p = memalign(a, n);
  return *p ? 0 : 12;  // ENOMEM
}
void free(void* p) { __libc_free(p); }
}

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
