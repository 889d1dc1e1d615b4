// The threaded paths of the kernels, for ThreadSanitizer: scripts/sanitize.sh builds this test with
// -fsanitize=thread and POLYMOE_STD_THREADS (kernels::parallel_for on std::threads, which TSan
// sees; Debian's oneTBB is not instrumented) and runs it. Every parallel loop of the kernels runs
// here with 4 threads: prepacking (per expert), activation quantization, the GEMM task grids of
// kernel::tiled for every scheme it implements (prefill with several row blocks per expert and
// decode), kernel::tiled_amx (its GEMMs as one pipeline of tasks with per-block counters; tiles
// where AMX is usable, its AVX-512 path otherwise), and
// kernel::tbb_grouped. Each case also requires the bits of a 1-thread run, so it fails on a wrong
// answer as well as on a race report.
#include <string>

#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include "test_util.hpp"

using namespace polymoe;

namespace {

template <class Q, class K>
void threads_agree(Activation act = Activation::silu) {
  const MoeConfig cfg = test::moe_config(160, 96, 8, 2, act);
  std::mt19937 rng(3);
  const MoeWeights w = test::random_weights(rng, cfg);
  for (index_t T : {1, 3, 150}) {  // decode-sized and prefill-sized batches
    const Matrix hidden = test::random_matrix(rng, T, cfg.hidden);
    const Routing r = test::random_routing(rng, T, cfg.num_experts, cfg.router.top_k);
    Matrix one;
    {
      tbb::global_control gc(tbb::global_control::max_allowed_parallelism, 1);
      MoeLayer<a2a::local, Q, K> layer(cfg, w, {}, test::make_kernel<K>());
      one = layer.forward_routed(hidden, r.ids, r.weights);
    }
    tbb::global_control gc(tbb::global_control::max_allowed_parallelism, 4);
    MoeLayer<a2a::local, Q, K> layer(cfg, w, {}, test::make_kernel<K>());  // prepacked with 4 threads
    for (int rep = 0; rep < 2; ++rep) {        // and again on warm buffers
      const Matrix four = layer.forward_routed(hidden, r.ids, r.weights);
      EXPECT_TRUE((four.array() == one.array()).all())
          << K::name << "/" << Q::name << " T=" << T << ": 4 threads differ from 1 (run " << rep << ")";
    }
  }
}

/// threads_agree over every scheme the table gives kernel K.
template <class K>
void every_scheme_of() {
  boost::mp11::mp_for_each<pairing::kernel_schemes<core_table, K>>([]<class Q>(Q) {
    if constexpr (std::is_same_v<Q, quant::fp32>)
      threads_agree<Q, K>(Activation::swiglu_oai);  // the clamped activation, once
    else
      threads_agree<Q, K>();
  });
}

TEST(Threads, Tiled) { every_scheme_of<kernel::tiled>(); }

TEST(Threads, TiledAmx) { every_scheme_of<kernel::tiled_amx>(); }

TEST(Threads, TbbGrouped) {
  threads_agree<quant::fp32, kernel::tbb_grouped>();
  threads_agree<quant::bf16, kernel::tbb_grouped>();
}

}  // namespace
