// Degenerate workloads: non-finite input stays in its token, huge batches stay within a memory
// bound, every token on one expert, k = E.
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include <boost/mp11/algorithm.hpp>
#include <gtest/gtest.h>

#include "test_util.hpp"

// The heap bytes the process holds, and their peak since the last reset, counted by replacing
// malloc and friends (every allocation goes through them: operator new, aligned new, Eigen, TBB),
// so that each layer's peak is its own and not the excess over an earlier layer's.
namespace {
std::atomic<long long> live_bytes{0}, peak_bytes{0};
void note(long long delta) {
  const long long now = live_bytes.fetch_add(delta, std::memory_order_relaxed) + delta;
  long long peak = peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}
long long usable(void* p) { return p ? static_cast<long long>(malloc_usable_size(p)) : 0; }
}  // namespace
void polymoe_test_acquired(void* p) { note(usable(p)); }
void polymoe_test_releasing(void* p) { note(-usable(p)); }
#include "malloc_hooks.hpp"

using namespace polymoe;
namespace mp = boost::mp11;

namespace {

MoeConfig config(index_t E, index_t k) {
  MoeConfig cfg;
  cfg.hidden = 32;
  cfg.intermediate = 16;
  cfg.num_experts = E;
  cfg.router.top_k = k;
  return cfg;
}

TEST(Degenerate, NonFiniteHiddenStaysInItsToken) {
  std::mt19937 rng(21);
  const MoeConfig cfg = config(6, 2);
  const MoeWeights w = test::random_weights(rng, cfg);
  Matrix hidden = test::random_matrix(rng, 19, 32);
  const Routing r = test::random_routing(rng, 19, 6, 2);
  hidden(4, 7) = std::nanf("");
  hidden(11, 0) = std::numeric_limits<float>::infinity();
  mp::mp_for_each<valid_triples>([&]<class A, class Q, class K>(mp::mp_list<A, Q, K>) {
    SCOPED_TRACE((test::triple_name<A, Q, K>()));
    MoeLayer<A, Q, K> layer(cfg, w, {}, test::make_kernel<K>());
    const Matrix out = layer.forward_routed(hidden, r.ids, r.weights);
    for (index_t t = 0; t < out.rows(); ++t) {
      const bool finite = out.row(t).allFinite();
      if (t == 4 || t == 11)
        EXPECT_FALSE(finite) << "token " << t;
      else
        EXPECT_TRUE(finite) << "token " << t << " was contaminated";
    }
  });
}

TEST(Degenerate, AllTokensOnOneExpertAndKEqualsE) {
  std::mt19937 rng(22);
  for (const index_t k : {index_t{1}, index_t{4}}) {
    const MoeConfig cfg = config(4, k);
    const MoeWeights w = test::random_weights(rng, cfg);
    const Matrix hidden = test::random_matrix(rng, 300, 32);
    IdMatrix ids(300, k);
    for (index_t t = 0; t < 300; ++t)
      for (index_t j = 0; j < k; ++j) ids(t, j) = static_cast<std::int32_t>(k == 1 ? 2 : j);
    const Matrix wt = Matrix::Constant(300, k, 1.0f / static_cast<float>(k));
    MoeLayer<a2a::local, quant::fp32, kernel::reference> ref(cfg, w);
    const Matrix want = ref.forward_routed(hidden, ids, wt);
    mp::mp_for_each<valid_triples>([&]<class A, class Q, class K>(mp::mp_list<A, Q, K>) {
      if constexpr (std::is_same_v<Q, quant::fp32>) {
        SCOPED_TRACE((test::triple_name<A, Q, K>()));
        MoeLayer<A, Q, K> layer(cfg, w, {}, test::make_kernel<K>());
        EXPECT_LE(test::relative_error(layer.forward_routed(hidden, ids, wt), want), 2e-5) << "k=" << k;
      }
    });
  }
}

TEST(Degenerate, LargeBatchWithoutMemoryBlowUp) {
  // T = 65536 tokens of H = 64 (16 MiB of input): the heap a layer holds at its peak (building it
  // and one forward, the result included) is a bounded multiple of the input (buffers
  // proportional to T·k·H), not more.
  std::mt19937 rng(23);
  MoeConfig cfg = config(16, 4);
  cfg.hidden = 64;
  const MoeWeights w = test::random_weights(rng, cfg);
  const index_t T = 65536;
  const Matrix hidden = test::random_matrix(rng, T, 64), logits = test::random_matrix(rng, T, 16);
  const double input_mb = static_cast<double>(T * 64 * sizeof(float)) / (1 << 20);
  // The counter sees allocations: a 32 MiB matrix moves the peak by at least that.
  {
    const long long base = live_bytes.load();
    peak_bytes.store(base);
    const Matrix probe = Matrix::Zero(T, 128);
    EXPECT_GE(peak_bytes.load() - base, T * 128 * static_cast<long long>(sizeof(float)));
  }
  int measured = 0;
  mp::mp_for_each<valid_triples>([&]<class A, class Q, class K>(mp::mp_list<A, Q, K>) {
    if constexpr (!std::is_same_v<K, kernel::reference> && std::is_same_v<Q, quant::bf16>) {
      const long long base = live_bytes.load();
      peak_bytes.store(base);
      {
        MoeLayer<A, Q, K> layer(cfg, w, {}, test::make_kernel<K>());
        const Matrix out = layer.forward(hidden, logits);
        EXPECT_TRUE(out.allFinite());
      }
      const double grew_mb = static_cast<double>(peak_bytes.load() - base) / (1 << 20);
      EXPECT_LE(grew_mb, 16 * input_mb) << test::triple_name<A, Q, K>() << " held " << grew_mb << " MiB of heap";
      std::printf("%s: T=%ld peak heap %.1f MiB (input %.1f MiB)\n", test::triple_name<A, Q, K>().c_str(),
                  static_cast<long>(T), grew_mb, input_mb);
      ++measured;
    }
  });
  EXPECT_GT(measured, 0);
}

}  // namespace
