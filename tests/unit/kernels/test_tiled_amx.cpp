// kernel::tiled_amx against the reference kernel, and its AMX tile kernels against the
// AVX-512 kernels they replace. Built twice: test_tiled_amx with the project's flags (an AMX-targeted
// build on an AMX machine: no run-time test) and test_tiled_amx_dispatch without AMX in the target
// (-mno-amx-*: AMX detected at run time). On a machine without AMX the tests of the tiles themselves
// are skipped with the reason; the layer tests then check the AVX-512 fallback.
#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include "test_util.hpp"

using namespace polymoe;

namespace {

namespace kt = kernels::tiled;

template <class Q>
void expect_agrees(const MoeConfig& cfg, index_t T, unsigned seed) {
  std::mt19937 rng(seed);
  const MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, T, cfg.hidden);
  const Routing r = test::random_routing(rng, T, cfg.num_experts, cfg.router.top_k);
  MoeLayer<a2a::local, Q, kernel::reference> ref(cfg, w);
  MoeLayer<a2a::local, Q, kernel::tiled_amx> layer(cfg, w, {}, test::make_kernel<kernel::tiled_amx>());
  const Matrix want = ref.forward_routed(hidden, r.ids, r.weights);
  const Matrix got = layer.forward_routed(hidden, r.ids, r.weights);
  EXPECT_LE(test::kernel_agreement_error<Q>(got, want), test::kernel_tolerance<Q>)
      << Q::name << " T=" << T << " H=" << cfg.hidden << " I=" << cfg.intermediate;
}

/// Every scheme the table gives kernel::tiled_amx.
template <class F>
void for_each_scheme(F&& f) {
  boost::mp11::mp_for_each<pairing::kernel_schemes<core_table, kernel::tiled_amx>>(
      [&]<class Q>(Q) { f.template operator()<Q>(); });
}

TEST(TiledAmx, SaysWhetherItRunsTiles) {
  const char* why = kt::amx_unavailable_reason();
  std::printf("AMX: %s (build %s)\n", why ? why : "available", kt::amx_target ? "targets AMX" : "detects at run time");
  if (kt::amx_target) {
    EXPECT_EQ(why, nullptr) << "an AMX-targeted build must run on an AMX machine";
  }
  EXPECT_EQ(kt::amx_enabled(), why == nullptr);
}

TEST(TiledAmx, AgreesWithTheReferenceAcrossBlockSizes) {
  // Few experts, so that blocks run from 1 row (decode, AVX-512) to 256 (sixteen tile row
  // groups), and T=600 gives experts more rows than one AMX block holds (about 300: cut in two);
  // H a multiple of 64 and not (int8's tile layout pads K to 64), I not a multiple of 32.
  for (const index_t H : {index_t{128}, index_t{200}})
    for (const index_t T : {index_t{1}, index_t{3}, index_t{7}, index_t{40}, index_t{130}, index_t{300}, index_t{600}}) {
      SCOPED_TRACE(T);
      for_each_scheme([&]<class Q>() { expect_agrees<Q>(test::moe_config(H, 72, 4, 2), T, static_cast<unsigned>(T + H)); });
    }
}

TEST(TiledAmx, BiasesAndWeightOnInput) {
  for_each_scheme([&]<class Q>() { expect_agrees<Q>(test::moe_config(64, 40, 3, 2, Activation::swiglu_oai), 50, 3u); });
  MoeConfig cfg = test::moe_config(128, 64, 4, 1);
  cfg.router_weight_on_input = true;
  for_each_scheme([&]<class Q>() { expect_agrees<Q>(cfg, 60, 4u); });
}

TEST(TiledAmx, SkippedSlots) {
  // Local id -1 (a slot routed to another rank) contributes nothing; some tokens have no slot
  // computed here at all (their inputs are never quantized or converted).
  const MoeConfig cfg = test::moe_config(128, 64, 4, 2);
  std::mt19937 rng(11);
  const MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, 40, cfg.hidden);
  Routing r = test::random_routing(rng, 40, 4, 2);
  for (index_t t = 0; t < 40; t += 3) r.ids(t, 1) = -1;
  for (index_t t = 0; t < 40; t += 5) r.ids(t, 0) = r.ids(t, 1) = -1;
  const ExpertMlp mlp{ActivationParams{}, false};
  const DispatchOutput<format::standard> d{hidden, r.ids, r.weights, 4};
  const kernel::tiled_amx k = test::make_kernel<kernel::tiled_amx>();
  for_each_scheme([&]<class Q>() {
    Matrix want(40, cfg.hidden), got(40, cfg.hidden);
    kernels::reference_standard<Q>(d, Q::quantize(w.experts), mlp, want);
    k.run<Q>(d, k.prepare<Q>(Q::quantize(w.experts)), mlp, CombineInput<format::standard>{got});
    EXPECT_LE(test::kernel_agreement_error<Q>(got, want), test::kernel_tolerance<Q>) << Q::name;
    for (index_t t = 0; t < 40; t += 5) EXPECT_TRUE(got.row(t).isZero()) << Q::name << " token " << t;
  });
}

TEST(TiledAmx, PhaseTimesOfTheForward) {
  const MoeConfig cfg = test::moe_config(128, 64, 4, 2);
  std::mt19937 rng(6);
  const MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, 40, cfg.hidden);
  const Routing r = test::random_routing(rng, 40, cfg.num_experts, cfg.router.top_k);
  for_each_scheme([&]<class Q>() {
    kt::PhaseTimes t;
    kernel::tiled_amx k = test::make_kernel<kernel::tiled_amx>();
    k.phases = &t;
    MoeLayer<a2a::local, Q, kernel::tiled_amx> layer(cfg, w, {}, k);
    const Matrix out = layer.forward_routed(hidden, r.ids, r.weights);
    EXPECT_EQ(t.forwards, 1) << Q::name;
    // the GEMMs run as one pipeline: their time is charged to `gemms`, none to gemm1 / act / gemm2
    for (const auto p : {kt::PhaseTimes::inputs, kt::PhaseTimes::gemms, kt::PhaseTimes::sum})
      EXPECT_GT(t.seconds[p], 0.0) << Q::name << " " << kt::PhaseTimes::names[p];
    for (const auto p : {kt::PhaseTimes::gemm1, kt::PhaseTimes::act, kt::PhaseTimes::gemm2})
      EXPECT_EQ(t.seconds[p], 0.0) << Q::name << " " << kt::PhaseTimes::names[p];
    // inside the pipeline, the workers' thread-time per kind of task: both GEMMs' tasks took some,
    // and all kinds together no more than the workers had (workers x the pipeline's wall time),
    // which the pipeline's wall time bounds in turn
    const auto& ts = t.task_seconds;
    EXPECT_GT(ts[kt::PhaseTimes::gemm1_tasks], 0.0) << Q::name;
    EXPECT_GT(ts[kt::PhaseTimes::gemm2_tasks], 0.0) << Q::name;
    const double busy = ts[kt::PhaseTimes::gemm1_tasks] + ts[kt::PhaseTimes::block_work] +
                        ts[kt::PhaseTimes::gemm2_tasks] + ts[kt::PhaseTimes::waiting];
    EXPECT_LE(busy, t.worker_seconds) << Q::name;
    EXPECT_LE(t.worker_seconds, static_cast<double>(kt::detail::pipeline_workers()) * t.seconds[kt::PhaseTimes::gemms])
        << Q::name;
    // each GEMM's epilogue is part of its tasks' time
    EXPECT_GT(ts[kt::PhaseTimes::gemm1_epilogue], 0.0) << Q::name;
    EXPECT_LE(ts[kt::PhaseTimes::gemm1_epilogue], ts[kt::PhaseTimes::gemm1_tasks]) << Q::name;
    EXPECT_GT(ts[kt::PhaseTimes::gemm2_epilogue], 0.0) << Q::name;
    EXPECT_LE(ts[kt::PhaseTimes::gemm2_epilogue], ts[kt::PhaseTimes::gemm2_tasks]) << Q::name;
    // only the integer schemes quantize the activations, inside GEMM 1's tasks or between the GEMMs
    if constexpr (std::is_same_v<Q, quant::int8_w8a8> || std::is_same_v<Q, quant::int4_w4a8>) {
      EXPECT_GT(ts[kt::PhaseTimes::act_quantize], 0.0);
      EXPECT_LE(ts[kt::PhaseTimes::act_quantize], ts[kt::PhaseTimes::gemm1_tasks] + ts[kt::PhaseTimes::block_work]);
    } else {
      EXPECT_EQ(ts[kt::PhaseTimes::act_quantize], 0.0);
    }
  });
}

// The pipeline's promise, checked on counters: a block's GEMM 2 tasks start only after all of
// its GEMM 1 tasks and its block_done, block_done runs once per block, every task runs once. The
// GEMM 1 tasks of some blocks are slowed down so that GEMM 2 tasks of other blocks overtake them.
TEST(TiledAmx, PipelineOrdersEachBlocksGemmsAndRunsEveryTaskOnce) {
  constexpr int blocks = 23, panels13 = 5, panels2 = 7;
  std::vector<kt::RowBlock> rb;
  std::vector<kt::Task> t13, t2;
  for (int b = 0; b < blocks; ++b) {
    rb.push_back({b % 4, 16 * b, 16});
    for (int p = 0; p < panels13; ++p) t13.push_back({b, p});
    for (int p = 0; p < panels2; ++p) t2.push_back({b, p});
  }
  for (int threads : {1, 3, 8}) {
    tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
    std::vector<std::atomic<int>> done13(blocks), done(blocks), ran2(blocks), early(blocks);
    // `next`, when given, is the task that the same thread runs next (its weights are prefetched)
    std::atomic<int> nexts{0}, wrong_next{0};
    const auto follow = [&](const kt::Task& t, const kt::Task* next) {
      static thread_local const kt::Task* expected = nullptr;
      if (expected != nullptr && expected != &t) wrong_next.fetch_add(1);
      expected = next;
      if (next != nullptr) nexts.fetch_add(1);
    };
    // every task gets a worker slot below pipeline_workers() that no task running at once has, and
    // no task of an untimed pipeline a clock sink
    const std::size_t workers = kt::detail::pipeline_workers();
    std::vector<std::atomic<int>> busy(workers);
    std::atomic<int> bad_slot{0}, shared_slot{0}, timed{0};
    const auto hold = [&](const kt::detail::worker& w) {
      if (w.task_ns != nullptr) timed.fetch_add(1);
      const std::size_t slot = w.slot;
      if (slot >= workers) return bad_slot.fetch_add(1), false;
      if (busy[slot].exchange(1) != 0) shared_slot.fetch_add(1);
      return true;
    };
    kt::Workspace::Counters counters;
    kt::detail::pipelined_tasks(
        rb, t13, panels13, t2, counters,
        [&](const kt::Task& t, const kt::Task* next, const kt::detail::worker& w) {
          const bool held = hold(w);
          follow(t, next);
          if (t.block % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
          done13[static_cast<std::size_t>(t.block)].fetch_add(1);
          if (held) busy[w.slot].store(0);
        },
        [&](index_t b) {
          if (done13[static_cast<std::size_t>(b)].load() != panels13) early[static_cast<std::size_t>(b)].fetch_add(1);
          done[static_cast<std::size_t>(b)].fetch_add(1);
        },
        [&](const kt::Task& t, const kt::Task* next) {
          follow(t, next);
          if (done[static_cast<std::size_t>(t.block)].load() != 1) early[static_cast<std::size_t>(t.block)].fetch_add(1);
          ran2[static_cast<std::size_t>(t.block)].fetch_add(1);
        });
    EXPECT_EQ(wrong_next.load(), 0) << threads << " threads";
    EXPECT_EQ(bad_slot.load(), 0) << threads << " threads";
    EXPECT_EQ(shared_slot.load(), 0) << threads << " threads";
    EXPECT_EQ(timed.load(), 0) << threads << " threads";
    EXPECT_GT(nexts.load(), 0) << threads << " threads";
    for (int b = 0; b < blocks; ++b) {
      const auto i = static_cast<std::size_t>(b);
      EXPECT_EQ(done13[i].load(), panels13) << "block " << b << ", " << threads << " threads";
      EXPECT_EQ(done[i].load(), 1) << "block " << b << ", " << threads << " threads";
      EXPECT_EQ(ran2[i].load(), panels2) << "block " << b << ", " << threads << " threads";
      EXPECT_EQ(early[i].load(), 0) << "block " << b << ": a task ran before its block was ready, " << threads
                                    << " threads";
    }
  }
}

TEST(TiledAmx, BitwiseIndependentOfThreadCount) {
  const MoeConfig cfg = test::moe_config(192, 96, 6, 2);
  std::mt19937 rng(8);
  const MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, 150, cfg.hidden);
  const Routing r = test::random_routing(rng, 150, 6, 2);
  for_each_scheme([&]<class Q>() {
    MoeLayer<a2a::local, Q, kernel::tiled_amx> layer(cfg, w, {}, test::make_kernel<kernel::tiled_amx>());
    Matrix first;
    for (int threads : {1, 2, 7}) {
      tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
      const Matrix out = layer.forward_routed(hidden, r.ids, r.weights);
      if (first.size() == 0)
        first = out;
      else
        EXPECT_TRUE((out.array() == first.array()).all()) << Q::name << ", " << threads << " threads";
    }
  });
}

/// The layers of the tuning tests below: swiglu_oai with biases (H=200, I=72, E=4, k=2: K not a
/// multiple of 64, the last activation panel partial), and a routing weight on the input (k=1).
std::vector<MoeConfig> tuning_test_configs() {
  MoeConfig weighted = test::moe_config(128, 64, 4, 1);
  weighted.router_weight_on_input = true;
  return {test::moe_config(200, 72, 4, 2, Activation::swiglu_oai, true), weighted};
}

// GEMM 1 inputs that are bf16 values already (an engine's bf16 hidden states) run the weight-only
// decoded formats' GEMM 1 with the split rows' hi terms alone (amx::bf16x2_hi_ops): the bits of
// both terms, in every scheme, decode-sized blocks (T=3) and prefill (T=300), a routing weight on
// the input (which makes most rows fp32 values again) and biases. Where the tiles do not run,
// tuning::one_term changes nothing and the check holds trivially; on the AMX machine it compares
// the two paths.
TEST(TiledAmx, OneTermGemm1GivesTheBitsOfBothTerms) {
  const auto one_term = [](bool on) {
    return test::make_kernel<kernel::tiled_amx>([on](kt::tuning& t) { t.one_term = on; });
  };
  for (const MoeConfig& cfg : tuning_test_configs())
    for (const index_t T : {index_t{3}, index_t{300}}) {
      std::mt19937 rng(static_cast<unsigned>(T + 7 * cfg.hidden));
      const MoeWeights w = test::random_weights(rng, cfg);
      Matrix hidden = test::random_matrix(rng, T, cfg.hidden);
      for (index_t i = 0; i < hidden.size(); ++i)
        hidden.data()[i] = codecs::bf16_to_float(codecs::float_to_bf16(hidden.data()[i]));
      hidden(0, 0) = -0.0f;
      const Routing r = test::random_routing(rng, T, cfg.num_experts, cfg.router.top_k);
      for_each_scheme([&]<class Q>() {
        MoeLayer<a2a::local, Q, kernel::tiled_amx> two_terms(cfg, w, {}, one_term(false));
        MoeLayer<a2a::local, Q, kernel::tiled_amx> hi_alone(cfg, w, {}, one_term(true));
        const Matrix both = two_terms.forward_routed(hidden, r.ids, r.weights);
        const Matrix one = hi_alone.forward_routed(hidden, r.ids, r.weights);
        EXPECT_EQ(std::memcmp(both.data(), one.data(), static_cast<std::size_t>(both.size()) * sizeof(float)), 0)
            << Q::name << " T=" << T << (cfg.router_weight_on_input ? ", weight on input" : "");
      });
    }
}

// GEMM 1 by block (one task per row block, its panels in turn, each panel's epilogue run row by
// row inside the next panel's tiles; int8: its input rows gathered into the worker's buffer, its
// activations kept there and quantized by the same task) gives the bits of GEMM 1 by (block,
// panel), in every format (mxfp4 runs GEMM 1 by panel either way), whatever the thread count: blocks of up to 256 rows (about 150 rows per
// expert at T=300) and blocks cut in two (about 300 at T=600), partial tiles,
// decode-sized blocks (T=3), K not a multiple of 64 (H=200), the last activation panel partial
// (I=72), biases, and inputs weighted per pair.
TEST(TiledAmx, Gemm1ByBlockGivesTheBitsOfGemm1ByPanel) {
  const auto by_block = [](kt::mode m) {
    return test::make_kernel<kernel::tiled_amx>([m](kt::tuning& t) { t.gemm1_by_block = m; });
  };
  for (const MoeConfig& cfg : tuning_test_configs())
    for (const index_t T : {index_t{3}, index_t{300}, index_t{600}}) {
      std::mt19937 rng(static_cast<unsigned>(T + cfg.hidden));
      const MoeWeights w = test::random_weights(rng, cfg);
      const Matrix hidden = test::random_matrix(rng, T, cfg.hidden);
      const Routing r = test::random_routing(rng, T, cfg.num_experts, cfg.router.top_k);
      for_each_scheme([&]<class Q>() {
        MoeLayer<a2a::local, Q, kernel::tiled_amx> panels(cfg, w, {}, by_block(kt::mode::off));
        MoeLayer<a2a::local, Q, kernel::tiled_amx> blocks(cfg, w, {}, by_block(kt::mode::on));
        const Matrix by_panel = panels.forward_routed(hidden, r.ids, r.weights);
        for (int threads : {1, 3, 7}) {
          tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
          const Matrix out = blocks.forward_routed(hidden, r.ids, r.weights);
          EXPECT_TRUE((out.array() == by_panel.array()).all())
              << Q::name << " T=" << T << " H=" << cfg.hidden << ", " << threads << " threads";
        }
      });
    }
}

// bf16's row-block cut (tuning::bf16_block_rows: 256, the library's, or 128) changes which
// rows share a block, not what any row computes: the tiles sum every output over k in the same
// order whatever the block, so both cuts give the same bits — one block per expert or two (about
// 150 rows per expert at T=300), two or three (about 300 at T=600), by block and by panel.
TEST(TiledAmx, Bf16BlockCutGivesTheSameBits) {
  const auto kernel_with = [](index_t cut, kt::mode by_block) {
    return test::make_kernel<kernel::tiled_amx>([=](kt::tuning& t) {
      t.bf16_block_rows = cut;
      t.gemm1_by_block = by_block;
    });
  };
  const MoeConfig cfg = test::moe_config(200, 72, 4, 2, Activation::swiglu_oai, true);
  for (const index_t T : {index_t{300}, index_t{600}}) {
    std::mt19937 rng(static_cast<unsigned>(T));
    const MoeWeights w = test::random_weights(rng, cfg);
    const Matrix hidden = test::random_matrix(rng, T, cfg.hidden);
    const Routing r = test::random_routing(rng, T, cfg.num_experts, cfg.router.top_k);
    for (const kt::mode b : {kt::mode::off, kt::mode::on}) {
      MoeLayer<a2a::local, quant::bf16, kernel::tiled_amx> wide(cfg, w, {}, kernel_with(256, b));
      MoeLayer<a2a::local, quant::bf16, kernel::tiled_amx> narrow(cfg, w, {}, kernel_with(128, b));
      EXPECT_TRUE((wide.forward_routed(hidden, r.ids, r.weights).array() ==
                   narrow.forward_routed(hidden, r.ids, r.weights).array())
                      .all())
          << "T=" << T << (b == kt::mode::on ? ", by block" : ", by panel");
    }
  }
}

// Every tuning but the AMX threshold changes how a forward runs, not what it computes: each
// setting away from the defaults gives the defaults' bits, in every scheme, for decode-sized blocks
// (T=3) and blocks of about 150 rows (T=300).
TEST(TiledAmx, EveryTuningGivesTheBitsOfTheDefaults) {
  const std::vector<std::string> settings = {
      "y-stream=on",   "y-stream=off",   "pipeline=off", "gemm1-by-block=on", "gemm1-by-block=off",
      "sum-span=16",   "sum-span=2048",  "huge-pages=off", "bf16-block-rows=128", "one-term=off",
      "row-group=off", "pipeline=off,gemm1-by-block=on"};
  const MoeConfig cfg = test::moe_config(200, 72, 4, 2, Activation::swiglu_oai, true);
  for (const index_t T : {index_t{3}, index_t{300}}) {
    std::mt19937 rng(static_cast<unsigned>(T + 5));
    const MoeWeights w = test::random_weights(rng, cfg);
    const Matrix hidden = test::random_matrix(rng, T, cfg.hidden);
    const Routing r = test::random_routing(rng, T, cfg.num_experts, cfg.router.top_k);
    for_each_scheme([&]<class Q>() {
      MoeLayer<a2a::local, Q, kernel::tiled_amx> base(cfg, w, {}, test::make_kernel<kernel::tiled_amx>());
      const Matrix want = base.forward_routed(hidden, r.ids, r.weights);
      for (const std::string& spec : settings) {
        const kernel::tiled_amx k{kt::parse_tuning(spec, test::tiled_tuning())};
        MoeLayer<a2a::local, Q, kernel::tiled_amx> layer(cfg, w, {}, k);
        EXPECT_TRUE((layer.forward_routed(hidden, r.ids, r.weights).array() == want.array()).all())
            << Q::name << " T=" << T << ", " << spec;
      }
    });
  }
}

// Every row block on the tiles (tuning::amx_min_rows = 1), decode-sized blocks included: still
// the reference's result within the kernel tolerance. Without AMX the fallback runs either way.
TEST(TiledAmx, EveryBlockOnTheTilesAgreesWithTheReference) {
  const MoeConfig cfg = test::moe_config(200, 72, 4, 2, Activation::swiglu_oai, true);
  for (const index_t T : {index_t{1}, index_t{3}, index_t{7}, index_t{40}}) {
    std::mt19937 rng(static_cast<unsigned>(T + 11));
    const MoeWeights w = test::random_weights(rng, cfg);
    const Matrix hidden = test::random_matrix(rng, T, cfg.hidden);
    const Routing r = test::random_routing(rng, T, cfg.num_experts, cfg.router.top_k);
    for_each_scheme([&]<class Q>() {
      MoeLayer<a2a::local, Q, kernel::reference> ref(cfg, w);
      MoeLayer<a2a::local, Q, kernel::tiled_amx> layer(
          cfg, w, {}, test::make_kernel<kernel::tiled_amx>([](kt::tuning& t) { t.amx_min_rows = 1; }));
      EXPECT_LE(test::kernel_agreement_error<Q>(layer.forward_routed(hidden, r.ids, r.weights),
                                                ref.forward_routed(hidden, r.ids, r.weights)),
                test::kernel_tolerance<Q>)
          << Q::name << " T=" << T;
    });
  }
}

// GEMM 2's epilogues with streamed stores (detail::stream_y: y and the weights larger than the
// last-level cache) write the values of the ordinary stores, bit for bit; rows shorter than a panel
// (the last panel of a hidden size that is not a multiple of 64) and unaligned rows take the
// ordinary stores.
TEST(TiledAmx, StreamedEpiloguesStoreTheSameValues) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::uniform_int_distribution<std::int32_t> i32(-100000, 100000);
  alignas(64) float c[kt::panel_cols], bias[kt::panel_cols], scale[kt::panel_cols];
  alignas(64) std::int32_t acc[kt::panel_cols], comp[kt::panel_cols];
  for (index_t p = 0; p < kt::panel_cols; ++p) {
    c[p] = u(rng), bias[p] = u(rng), scale[p] = u(rng) * 1e-3f;
    acc[p] = i32(rng), comp[p] = i32(rng) / 4;
  }
  const kt::I8Panel panel{nullptr, comp, scale, true};
  for (const index_t n : {kt::panel_cols, index_t{40}})
    for (const index_t offset : {index_t{0}, index_t{1}}) {
      alignas(64) float plain[2 * kt::panel_cols] = {}, streamed[2 * kt::panel_cols] = {};
      kt::detail::add_row(c, bias, 0.37f, plain + offset, n);
      kt::detail::add_row(c, bias, 0.37f, streamed + offset, n, true);
      EXPECT_EQ(std::memcmp(plain, streamed, sizeof plain), 0) << "add_row n=" << n << " offset " << offset;
      kt::detail::scale_i8_row(acc, 0.013f, panel, bias, 0.61f, plain + offset, n);
      kt::detail::scale_i8_row(acc, 0.013f, panel, bias, 0.61f, streamed + offset, n, true);
      EXPECT_EQ(std::memcmp(plain, streamed, sizeof plain), 0) << "scale_i8_row n=" << n << " offset " << offset;
      EXPECT_NE(plain[offset], 0.0f);  // (written at all)
    }
}

/// Byte of int8 weight (k, column c) in the tile layout of kernel::tiled_amx, as amx.hpp describes
/// it: [K/64][4 column tiles][16 quads][16 columns][4].
index_t tile_byte(index_t k, index_t c) {
  const index_t kblock = k / 64, col_tile = c / 16, quad = k % 64 / 4;
  return ((kblock * 4 + col_tile) * 16 + quad) * 64 + c % 16 * 4 + k % 4;
}

TEST(TiledAmx, Int8TileLayoutRunsOnTheVnniPath) {
  // Blocks below the AMX threshold (and every block without AMX) run the VNNI kernel over the
  // panels that AMX reads: the same integers as from the VNNI layout of kernel::tiled, and as a
  // scalar sum. K = 640: two 32 KiB slabs; rows from 1 (decode, with its prefetch) to 40.
  constexpr index_t K4 = 640;
  std::mt19937 rng(2);
  std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127);
  std::vector<std::int8_t> w(static_cast<std::size_t>(K4 * kt::panel_cols));
  for (auto& v : w) v = static_cast<std::int8_t>(s8(rng));
  kt::AlignedBuffer<std::int8_t> tiled(w.size()), vnni(w.size());
  for (index_t k = 0; k < K4; ++k)
    for (index_t c = 0; c < kt::panel_cols; ++c) {
      const std::int8_t v = w[static_cast<std::size_t>(k * kt::panel_cols + c)];
      tiled.data()[tile_byte(k, c)] = v;
      vnni.data()[((k / 4) * kt::panel_cols + c) * 4 + k % 4] = v;
    }
  for (const index_t m : {index_t{1}, index_t{2}, index_t{5}, index_t{16}, index_t{40}}) {
    std::vector<std::uint8_t> a(static_cast<std::size_t>(m * K4));
    for (auto& v : a) v = static_cast<std::uint8_t>(u8(rng));
    const auto row = [&](index_t i) { return a.data() + i * K4; };
    alignas(64) std::int32_t from_tiles[kt::amx_block_rows * kt::panel_cols];
    alignas(64) std::int32_t from_vnni[kt::amx_block_rows * kt::panel_cols];
    kt::detail::block_times_i8panel(m, row, K4, kt::I8Panel{tiled.data(), nullptr, nullptr, true}, from_tiles);
    kt::detail::block_times_i8panel(m, row, K4, kt::I8Panel{vnni.data(), nullptr, nullptr, false}, from_vnni);
    for (index_t i = 0; i < m; ++i)
      for (index_t c = 0; c < kt::panel_cols; ++c) {
        std::int32_t sum = 0;
        for (index_t k = 0; k < K4; ++k)
          sum += a[static_cast<std::size_t>(i * K4 + k)] * w[static_cast<std::size_t>(k * kt::panel_cols + c)];
        const index_t at = i * kt::panel_cols + c;
        ASSERT_EQ(from_tiles[at], sum) << "m=" << m << " row " << i << " column " << c;
        ASSERT_EQ(from_vnni[at], sum) << "m=" << m << " row " << i << " column " << c;
      }
  }
}

/// int4 panels packed in int8's tile layout (kernel::tiled_amx) and VNNI layout (kernel::tiled)
/// against rows m: each column's sum over groups of 32 k of s_g · sum_{k in g} (a[k] - 128) · w[k],
/// worked out here in double. K = 640: 20 groups, three slabs of unpacking; K = 200: the VNNI
/// panel pads to 7 groups, the tile panel to 8. `amx`: the tile-layout panel on the tiles (rows a
/// tile stride apart), else on the VNNI path.
void expect_int4_products(bool amx, std::initializer_list<index_t> rows) {
  std::mt19937 rng(12);
  std::uniform_int_distribution<int> u8(0, 255), s4(-8, 7);
  std::uniform_real_distribution<float> scale(0.01f, 2.0f);
  for (const index_t K : {index_t{640}, index_t{200}}) {
    const ExpertShape shape{1, K, kt::panel_cols, false, false};  // GEMM 1: one panel of 64 rows of K
    const index_t groups = (K + 31) / 32;
    std::vector<int> w(static_cast<std::size_t>(kt::panel_cols * K));
    std::vector<float> s(static_cast<std::size_t>(kt::panel_cols * groups));
    for (auto& v : w) v = s4(rng);
    for (auto& v : s) v = scale(rng);
    const auto code = [&](index_t, index_t r, index_t k) {
      return static_cast<std::int8_t>(w[static_cast<std::size_t>(r * K + k)]);
    };
    const auto sc = [&](index_t, index_t r, index_t g) { return s[static_cast<std::size_t>(r * groups + g)]; };
    const auto none = [](index_t) -> const float* { return nullptr; };
    const auto zero = [](index_t, index_t, index_t) { return std::int8_t{0}; };  // GEMM 2, [K, 64]: not used
    const auto one = [](index_t, index_t, index_t) { return 1.0f; };
    for (const bool tiles : {true, false}) {
      if (amx && !tiles) continue;
      const kt::Int4PackedExperts p = kt::pack_int4(shape, code, sc, zero, one, none, none, tiles, false);
      const index_t K4 = p.kpad(K);
      for (const index_t m : rows) {
        std::vector<std::uint8_t> a(static_cast<std::size_t>((m + 16) * K4), 128);  // padding: code 0
        for (index_t i = 0; i < m; ++i)
          for (index_t k = 0; k < K; ++k) a[static_cast<std::size_t>(i * K4 + k)] = static_cast<std::uint8_t>(u8(rng));
        const auto row = [&](index_t i) { return a.data() + i * K4; };
        alignas(64) float got[kt::amx_block_rows * kt::panel_cols];
        kt::detail::block_times_i4panel(m, row, K4, p.panel13(0, 0), got, amx ? K4 : 0, 16);
        for (index_t i = 0; i < m; ++i)
          for (index_t c = 0; c < kt::panel_cols; ++c) {
            const index_t r = p.row13(0, c);
            double want = 0.0, size = 0.0;
            for (index_t g = 0; g < groups; ++g) {
              std::int64_t dot = 0;
              for (index_t k = 32 * g; k < std::min(K, 32 * g + 32); ++k)
                dot += (a[static_cast<std::size_t>(i * K4 + k)] - 128) * w[static_cast<std::size_t>(r * K + k)];
              want += static_cast<double>(dot) * sc(0, r, g);
              size += std::abs(static_cast<double>(dot) * sc(0, r, g));
            }
            ASSERT_NEAR(got[i * kt::panel_cols + c], want, 1e-6 * size + 1e-6)
                << "K=" << K << (tiles ? " tiles" : " vnni") << " m=" << m << " row " << i << " column " << c;
          }
      }
    }
  }
}

TEST(TiledAmx, Int4PanelsOfEitherLayoutGiveTheGroupScaledProducts) {
  expect_int4_products(false, {1, 2, 5, 40});
}

/// The decode path (one or two rows, the nibbles unpacked in registers) against the same rows in a
/// block of five (the slab path): a row's sums do not depend on the rows beside it, so the bits
/// must be the same, in either layout.
TEST(TiledAmx, Int4DecodeRowsAreTheSlabPathsBits) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> u8(0, 255), s4(-8, 7);
  std::uniform_real_distribution<float> scale(0.001f, 3.0f);
  for (const index_t K : {index_t{640}, index_t{200}}) {
    const ExpertShape shape{1, K, kt::panel_cols, false, false};
    const index_t groups = (K + 31) / 32;
    const auto code = [&](index_t, index_t r, index_t k) { return static_cast<std::int8_t>((r * 7 + k * 13) % 16 - 8); };
    std::vector<float> s(static_cast<std::size_t>(kt::panel_cols * groups));
    for (auto& v : s) v = scale(rng);
    const auto sc = [&](index_t, index_t r, index_t g) { return s[static_cast<std::size_t>(r * groups + g)]; };
    const auto none = [](index_t) -> const float* { return nullptr; };
    const auto zero = [](index_t, index_t, index_t) { return std::int8_t{0}; };
    const auto one = [](index_t, index_t, index_t) { return 1.0f; };
    for (const bool tiles : {true, false}) {
      const kt::Int4PackedExperts p = kt::pack_int4(shape, code, sc, zero, one, none, none, tiles, false);
      const index_t K4 = p.kpad(K);
      std::vector<std::uint8_t> a(static_cast<std::size_t>(21 * K4), 128);
      for (index_t i = 0; i < 5; ++i)
        for (index_t k = 0; k < K; ++k) a[static_cast<std::size_t>(i * K4 + k)] = static_cast<std::uint8_t>(u8(rng));
      const auto row = [&](index_t i) { return a.data() + i * K4; };
      alignas(64) float five[kt::amx_block_rows * kt::panel_cols], few[kt::amx_block_rows * kt::panel_cols];
      kt::detail::block_times_i4panel(5, row, K4, p.panel13(0, 0), five);
      for (const index_t m : {index_t{1}, index_t{2}}) {
        kt::detail::block_times_i4panel(m, row, K4, p.panel13(0, 0), few);
        ASSERT_EQ(std::memcmp(few, five, sizeof(float) * static_cast<std::size_t>(m * kt::panel_cols)), 0)
            << "K=" << K << (tiles ? " tiles" : " vnni") << " m=" << m;
      }
    }
  }
}

#if POLYMOE_TILED_AMX_CODE

TEST(TiledAmx, Int4TilesGiveTheGroupScaledProducts) {
  if (const char* why = kt::amx_unavailable_reason()) GTEST_SKIP() << "no AMX here: " << why;
  expect_int4_products(true, {16, 48, 256});
}

TEST(TiledAmx, Int8TilesGiveTheIntegers) {
  if (const char* why = kt::amx_unavailable_reason()) GTEST_SKIP() << "no AMX here: " << why;
  // One panel of K = 640 (10 tiles of 64 k: a second slab) against 48 rows, every value range.
  constexpr index_t K4 = 640, m = 48;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127);
  kt::AlignedBuffer<std::int8_t> panel(static_cast<std::size_t>(K4 * kt::panel_cols));
  for (std::size_t i = 0; i < panel.size(); ++i) panel.data()[i] = static_cast<std::int8_t>(s8(rng));
  std::vector<std::uint8_t> a(static_cast<std::size_t>((m + 16) * K4));
  for (auto& v : a) v = static_cast<std::uint8_t>(u8(rng));
  alignas(64) std::int32_t tiles[kt::block_rows * kt::panel_cols], want[kt::block_rows * kt::panel_cols];
  alignas(64) std::int32_t with_next[kt::block_rows * kt::panel_cols];
  kt::amx::int8_block(a.data(), K4, m, K4, panel.data(), nullptr, tiles);
  // naming a next panel (here the same one) only adds prefetches
  kt::amx::int8_block(a.data(), K4, m, K4, panel.data(), panel.data(), with_next);
  for (index_t i = 0; i < m; ++i)
    for (index_t p = 0; p < kt::panel_cols; ++p) {
      std::int32_t sum = 0;
      for (index_t k = 0; k < K4; ++k)
        sum += a[static_cast<std::size_t>(i * K4 + k)] * panel.data()[tile_byte(k, p)];
      want[i * kt::panel_cols + p] = sum;
    }
  for (index_t i = 0; i < m * kt::panel_cols; ++i) {
    ASSERT_EQ(tiles[i], want[i]) << "element " << i;
    ASSERT_EQ(with_next[i], want[i]) << "element " << i << ", next panel named";
  }
}

TEST(TiledAmx, Bf16TilesAgreeWithTheFmaLoop) {
  if (const char* why = kt::amx_unavailable_reason()) GTEST_SKIP() << "no AMX here: " << why;
  for (const index_t m : {index_t{4}, index_t{16}, index_t{17}, index_t{48}}) {
    constexpr index_t K = 300, K32 = kt::padded_k32(K);  // 10 k-blocks: a second slab
    std::mt19937 rng(static_cast<unsigned>(m));
    std::normal_distribution<float> nd;
    kt::AlignedBuffer<std::uint16_t> panel(static_cast<std::size_t>(K32 * kt::panel_cols));
    for (index_t k = 0; k < K; ++k)
      for (index_t c = 0; c < kt::panel_cols; ++c)
        panel.data()[kt::amx_bf16_slot(k, c)] = codecs::float_to_bf16(nd(rng));
    std::vector<std::uint16_t> a(static_cast<std::size_t>((m + 16) * K32), 0);
    for (index_t i = 0; i < m; ++i)
      for (index_t k = 0; k < K; ++k) a[static_cast<std::size_t>(i * K32 + k)] = codecs::float_to_bf16(nd(rng));
    alignas(64) float tiles[kt::block_rows * kt::panel_cols], fma[kt::block_rows * kt::panel_cols];
    kt::amx::bf16_block(a.data(), K32, m, K32, panel.data(), m % 2 ? panel.data() : nullptr, tiles);
    kt::detail::amx_layout_rows(m, a.data(), K32, K, panel.data(), fma, /*short_loops=*/true);
    double worst = 0.0;
    for (index_t i = 0; i < m * kt::panel_cols; ++i)
      worst = std::max(worst, static_cast<double>(std::abs(tiles[i] - fma[i])) / (1.0 + std::abs(fma[i])));
    EXPECT_LE(worst, 1e-5) << "m=" << m;  // the same products, summed in another order
  }
}

#endif

#if POLYMOE_TILED_AVX512 && POLYMOE_TILED_ISA_BF16
TEST(TiledAmx, DpBf16LoopAgreesWithTheFmaLoopAndDouble) {
  // amx_layout_tile_dp (vdpbf16ps, chosen where POLYMOE_TILED_DPBF16) against the FMA loop over
  // the same layout and against a double-precision sum of the same bf16 values: the products are
  // exact in fp32, so both differ from the exact sum by fp32 rounding of the running sums only.
  constexpr index_t K = 300, K32 = kt::padded_k32(K);
  std::mt19937 rng(31);
  std::normal_distribution<float> nd;
  kt::AlignedBuffer<std::uint16_t> panel(static_cast<std::size_t>(K32 * kt::panel_cols));
  std::fill_n(panel.data(), panel.size(), std::uint16_t{0});
  for (index_t k = 0; k < K; ++k)
    for (index_t c = 0; c < kt::panel_cols; ++c) panel.data()[kt::amx_bf16_slot(k, c)] = codecs::float_to_bf16(nd(rng));
  std::vector<std::vector<std::uint16_t>> rows(6, std::vector<std::uint16_t>(static_cast<std::size_t>(K32), 0));
  for (auto& r : rows)
    for (index_t k = 0; k < K; ++k) r[static_cast<std::size_t>(k)] = codecs::float_to_bf16(nd(rng));
  const std::uint16_t* a[6];
  for (int i = 0; i < 6; ++i) a[i] = rows[static_cast<std::size_t>(i)].data();
  alignas(64) float dp[6 * kt::panel_cols], fma[6 * kt::panel_cols];
  kt::amx_layout_tile_dp<6>(a, K32, panel.data(), dp);
  kt::amx_layout_tile<6>(a, K32, panel.data(), fma);
  alignas(64) float one[kt::panel_cols];
  kt::amx_layout_tile_dp<1>(a + 5, K32, panel.data(), one);
  double worst_fma = 0.0, worst_exact = 0.0;
  for (index_t i = 0; i < 6; ++i)
    for (index_t p = 0; p < kt::panel_cols; ++p) {
      double exact = 0.0, mag = 0.0;
      for (index_t k = 0; k < K; ++k) {
        const double t = double(codecs::bf16_to_float(a[i][k])) *
                         double(codecs::bf16_to_float(panel.data()[kt::amx_bf16_slot(k, p)]));
        exact += t;
        mag += std::abs(t);
      }
      const double got = dp[i * kt::panel_cols + p];
      worst_exact = std::max(worst_exact, std::abs(got - exact) / mag);
      worst_fma = std::max(worst_fma, std::abs(got - fma[i * kt::panel_cols + p]) / mag);
    }
  // Each rounding of a running sum errs by at most 2^-24 of sum |terms|: K / 2 (+ slack) of them
  // for the pairs, K for the FMA loop. A wrong product or pairing errs by the terms themselves.
  const double u = std::ldexp(1.0, -24);
  EXPECT_LE(worst_exact, (K / 2 + 2) * u);
  EXPECT_LE(worst_fma, (K / 2 + 2 + K) * u);
  for (index_t p = 0; p < kt::panel_cols; ++p)  // one row alone gives that row's sums, bit for bit
    EXPECT_EQ(one[p], dp[5 * kt::panel_cols + p]) << "column " << p;
}
#endif

// MXFP4 on the tiles (kernels/tiled/amx_e2m1.hpp). Which layers may: every weight a normal bf16 or
// zero, so a block with a nonzero code needs its scale code in [2, 252]; an all-zero block (codes
// 0 or -0) may have any scale.
TEST(TiledAmx, Mxfp4ExactInBf16OnlyForNormalScales) {
  std::vector<std::uint8_t> blocks(32, 0), scales = {127, 127};
  blocks[5] = 0x70;  // block 0: +6 in a high nibble
  EXPECT_TRUE(kt::mxfp4_exact_in_bf16(blocks, scales));
  for (const std::uint8_t bad : {std::uint8_t{0}, std::uint8_t{1}, std::uint8_t{253}, std::uint8_t{254}}) {
    scales[0] = bad;
    EXPECT_FALSE(kt::mxfp4_exact_in_bf16(blocks, scales)) << int(bad);
  }
  scales[0] = 2;
  EXPECT_TRUE(kt::mxfp4_exact_in_bf16(blocks, scales));
  scales[0] = 252;
  EXPECT_TRUE(kt::mxfp4_exact_in_bf16(blocks, scales));
  scales[1] = 0;  // block 1 holds only zeros and negative zeros: any scale
  std::fill(blocks.begin() + 16, blocks.end(), std::uint8_t{0x88});
  EXPECT_TRUE(kt::mxfp4_exact_in_bf16(blocks, scales));
  blocks[31] = 0x81;  // -0 and +0.5
  EXPECT_FALSE(kt::mxfp4_exact_in_bf16(blocks, scales));
}

/// Layers of scheme Q on the reference kernel and on tiled_amx, built from weights w (fp32 or the
/// scheme's own), agree on 40 random tokens.
template <class Q, class W>
void expect_layers_agree(const MoeConfig& cfg, const W& w, std::mt19937& rng) {
  const Matrix hidden = test::random_matrix(rng, 40, cfg.hidden);
  const Routing r = test::random_routing(rng, 40, cfg.num_experts, cfg.router.top_k);
  MoeLayer<a2a::local, Q, kernel::reference> ref(cfg, w);
  MoeLayer<a2a::local, Q, kernel::tiled_amx> layer(cfg, w, {}, test::make_kernel<kernel::tiled_amx>());
  EXPECT_LE(test::kernel_agreement_error<Q>(layer.forward_routed(hidden, r.ids, r.weights),
                                            ref.forward_routed(hidden, r.ids, r.weights)),
            test::kernel_tolerance<Q>)
      << Q::name;
}

TEST(TiledAmx, Mxfp4LayerWithTinyScalesAgreesWithTheReference) {
  // Weights of about 1e-39 (scale code 0 where the block is not all zero) would be subnormal in
  // bf16, which the tiles read as zero: such a layer runs kernel::tiled's path, and still agrees.
  const MoeConfig cfg = test::moe_config(64, 32, 2, 1);
  std::mt19937 rng(21);
  MoeWeights w = test::random_weights(rng, cfg);
  w.experts.w13.row(3).setConstant(1e-38f);  // scale code 0, elements 1.5 or 2: about 1e-38 again
  const quant::mxfp4::weights q = quant::mxfp4::quantize(w.experts);
  EXPECT_FALSE(kt::mxfp4_exact_in_bf16(q.w13_blocks, q.w13_scales));
  EXPECT_FALSE(test::make_kernel<kernel::tiled_amx>().prepare<quant::mxfp4>(q).packed.use_amx);
  expect_layers_agree<quant::mxfp4>(cfg, w, rng);
}

// NVFP4 on the tiles (weight-only and W4A4): every e2m1 · e4m3 is a normal bf16 value or zero, but
// the decode takes the block scales as unsigned: a layer with a negative one (or -0) runs
// kernel::tiled's path.
TEST(TiledAmx, Nvfp4LayerWithANegativeScaleAgreesWithTheReference) {
  const MoeConfig cfg = test::moe_config(64, 32, 2, 1);
  std::mt19937 rng(22);
  const MoeWeights w = test::random_weights(rng, cfg);
  BasicMoeWeights<quant::nvfp4::weights> q;
  q.experts = quant::nvfp4::quantize(w.experts);
  q.router_weight = w.router_weight;
  EXPECT_TRUE(kt::nvfp4_scales_unsigned(q.experts.w13_scale));
  EXPECT_TRUE(kt::nvfp4_scales_unsigned(q.experts.w2_scale));
  const kernel::tiled_amx k = test::make_kernel<kernel::tiled_amx>();
  EXPECT_EQ(k.prepare<quant::nvfp4>(q.experts).packed.use_amx, kt::amx_enabled());
  for (const std::size_t i : {std::size_t{5}, std::size_t{70}}) q.experts.w2_scale[i] |= 0x80;  // blocks negated
  EXPECT_FALSE(kt::nvfp4_scales_unsigned(q.experts.w2_scale));
  EXPECT_FALSE(k.prepare<quant::nvfp4>(q.experts).packed.use_amx);
  EXPECT_FALSE(k.prepare<quant::nvfp4_w4a4>(q.experts).packed.use_amx);
  expect_layers_agree<quant::nvfp4>(cfg, q, rng);
  expect_layers_agree<quant::nvfp4_w4a4>(cfg, q, rng);
}

#if POLYMOE_TILED_AVX512

TEST(TiledAmx, SplitRowsCarryTheFp32Values) {
  // x = hi + lo, both bf16: within 2^-17 |x| (hi rounds to 8 bits, lo the remainder to 8 more);
  // zeros past n up to n32; infinities keep lo = 0 (no inf - inf).
  constexpr index_t n = 70, n32 = 96;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = nd(rng) * std::exp2(static_cast<float>(static_cast<int>(rng() % 40) - 20));
  x[7] = std::numeric_limits<float>::infinity();
  x[8] = 0.0f;
  std::vector<std::uint16_t> row(2 * n32, 0xFFFF);
  const float wt = 0.3f;
  kt::split_bf16_row(x.data(), wt, n, n32, row.data());
  const auto term = [&](index_t k, bool low) {
    return codecs::bf16_to_float(row[static_cast<std::size_t>((k / 32) * 64 + (low ? 32 : 0) + k % 32)]);
  };
  for (index_t k = 0; k < n32; ++k) {
    const float hi = term(k, false), lo = term(k, true);
    if (k >= n) {
      EXPECT_EQ(hi, 0.0f) << k;
      EXPECT_EQ(lo, 0.0f) << k;
      continue;
    }
    const float v = x[static_cast<std::size_t>(k)] * wt;
    if (std::isinf(v)) {
      EXPECT_EQ(hi, v);
      EXPECT_EQ(lo, 0.0f);
      continue;
    }
    EXPECT_EQ(hi, codecs::bf16_to_float(codecs::float_to_bf16(v))) << k;
    EXPECT_LE(std::abs(double(v) - double(hi) - double(lo)), std::ldexp(std::abs(double(v)), -17)) << k;
  }
}

TEST(TiledAmx, SplitRowsSayWhetherEveryLoTermIsZero) {
  // split_bf16_row's answer, which sends a block's GEMM 1 to the hi term alone: true for rows of
  // bf16 values (zeros of both signs and infinities included; with a routing weight of 1 or a power
  // of two), false as soon as one value of the row (the first, the last, one past a k-block edge)
  // is not a bf16 value, or the routing weight makes one so.
  constexpr index_t n = 100, n32 = 128;
  std::mt19937 rng(21);
  std::normal_distribution<float> nd;
  std::vector<float> x(n);
  for (auto& v : x) v = codecs::bf16_to_float(codecs::float_to_bf16(nd(rng)));
  x[3] = -0.0f, x[4] = std::numeric_limits<float>::infinity(), x[5] = 0.0f;
  std::vector<std::uint16_t> row(n32 * 2);
  EXPECT_TRUE(kt::split_bf16_row(x.data(), 1.0f, n, n32, row.data()));
  EXPECT_TRUE(kt::split_bf16_row(x.data(), 0.25f, n, n32, row.data()));
  EXPECT_FALSE(kt::split_bf16_row(x.data(), 0.3f, n, n32, row.data()));
  for (const index_t i : {index_t{0}, index_t{33}, index_t{n - 1}}) {
    std::vector<float> y = x;
    y[static_cast<std::size_t>(i)] = 1.0f + std::ldexp(1.0f, -12);  // not a bf16 value
    EXPECT_FALSE(kt::split_bf16_row(y.data(), 1.0f, n, n32, row.data())) << i;
  }
}

/// Decodes k-blocks [0, 4) and then [4, K32 / 32) of a panel of K rows, as a task's slabs do, with
/// decode(kb0, kb1, out), and checks every slot of the tile layout: the bf16 bits want(k, c) for
/// k < K, zero past K.
template <class Decode, class Want>
void expect_decoded_slab(index_t K, Decode&& decode, Want&& want) {
  const index_t K32 = kt::padded_k32(K), nkb = K32 / kt::amx_kb;
  kt::AlignedBuffer<std::uint16_t> slab(static_cast<std::size_t>(K32 * 64));
  decode(index_t{0}, index_t{4}, slab.data());
  decode(index_t{4}, nkb, slab.data() + 4 * 4 * kt::amx_tile_elems);
  for (index_t k = 0; k < K32; ++k)
    for (index_t c = 0; c < kt::panel_cols; ++c) {
      const std::uint16_t got = slab.data()[kt::amx_bf16_slot(k, c)];
      ASSERT_EQ(got, k < K ? want(k, c) : std::uint16_t{0}) << "k=" << k << " c=" << c;
    }
}

/// A random E2M1 panel of K rows in kernel::tiled's layout (qpanel.hpp; the same for MXFP4 and
/// NVFP4): its codes, and code_of[k * 64 + c], the code of row k, column c.
std::vector<std::uint8_t> random_e2m1_panel(index_t K, std::mt19937& rng, std::vector<std::uint8_t>& code_of) {
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(K * 32), 0);
  code_of.assign(static_cast<std::size_t>(K * 64), 0);
  for (index_t k = 0; k < K; ++k)
    for (index_t c = 0; c < kt::panel_cols; ++c) {
      const auto code = static_cast<std::uint8_t>(rng() % 16);
      code_of[static_cast<std::size_t>(k * 64 + c)] = code;
      const auto [byte, shift] = kt::code_position<kt::mxfp4_format>(c);
      codes[static_cast<std::size_t>(k * 32 + byte)] |= static_cast<std::uint8_t>(code << shift);
    }
  return codes;
}

TEST(TiledAmx, Mxfp4SlabDecodesEveryWeightExactly) {
  // A hand-made MXFP4 panel in kernel::tiled's layout (qpanel.hpp), K = 199 (the last k-block
  // partial, its last k-pair half outside): every decoded weight is bf16(e2m1 · 2^(e - 127)) at its
  // tile-layout slot, exact, rows past K zero, for every code (both signs of zero) and scale codes
  // 2 to 252.
  constexpr index_t K = 199, K32 = kt::padded_k32(K), groups = K32 / 32;
  std::mt19937 rng(3);
  std::vector<std::uint8_t> scales(static_cast<std::size_t>(groups * 64)), code_of;
  const std::vector<std::uint8_t> codes = random_e2m1_panel(K, rng, code_of);
  for (auto& s : scales) s = static_cast<std::uint8_t>(2 + rng() % 251);
  scales[0] = 2, scales[1] = 252;
  const kt::QPanel<kt::mxfp4_format> panel{codes.data(), scales.data(), 1.0f};
  // the value is exact in bf16, so equal bits are the value; both zeros decode to +0 (the tiles'
  // sums start from +0, so a zero weight's sign cannot reach them)
  expect_decoded_slab(
      K, [&](index_t kb0, index_t kb1, std::uint16_t* out) { kt::decode_e2m1_slab(panel, K, kb0, kb1, out); },
      [&](index_t k, index_t c) {
        const std::uint16_t b =
            codecs::float_to_bf16(codecs::e2m1_to_float(code_of[static_cast<std::size_t>(k * 64 + c)]) *
                                  codecs::e8m0_to_float(scales[static_cast<std::size_t>((k / 32) * 64 + c)]));
        return b == 0x8000 ? std::uint16_t{0} : b;
      });
}

TEST(TiledAmx, Nvfp4SlabDecodesEveryWeightExactly) {
  // A hand-made NVFP4 panel in kernel::tiled's layout (qpanel.hpp), K = 200 (13 scale groups of
  // 16, the last k-block partial): every decoded weight is bf16(e2m1 · e4m3) at its tile-layout
  // slot, exact, rows past K zero, for every code (both signs of zero) and every unsigned scale
  // code but the NaN (zero and the subnormals included). scale_2 is not the decode's.
  constexpr index_t K = 200, groups = 13;
  std::mt19937 rng(6);
  std::vector<std::uint8_t> scales(static_cast<std::size_t>(groups * 64)), code_of;
  const std::vector<std::uint8_t> codes = random_e2m1_panel(K, rng, code_of);
  for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<std::uint8_t>((i * 5) % 127);  // 0 .. 0x7E
  const kt::QPanel<kt::nvfp4_format> panel{codes.data(), scales.data(), 0.37f};
  expect_decoded_slab(
      K, [&](index_t kb0, index_t kb1, std::uint16_t* out) { kt::decode_e2m1_slab(panel, K, kb0, kb1, out); },
      [&](index_t k, index_t c) {
        return codecs::float_to_bf16(codecs::e2m1_to_float(code_of[static_cast<std::size_t>(k * 64 + c)]) *
                                     codecs::e4m3_to_float(scales[static_cast<std::size_t>((k / 16) * 64 + c)]));
      });
}

#if POLYMOE_TILED_ISA_VBMI
TEST(TiledAmx, VbmiKpairLoadGivesTheShuffledLoadsWords) {
  // The decoders' k-pair load (load_kpair_vbmi in this build) against load_kpair_shuffled, the
  // load of builds without AVX512-VBMI: the same 64 words for every k-pair of a panel of K = 7
  // rows (the last pair's second row past K, then a pair wholly past K), random bytes past K
  // (they must read as zero) and random codes before.
  constexpr index_t K = 7;
  std::mt19937 rng(12);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(12 * 32));
  for (auto& b : codes) b = static_cast<std::uint8_t>(rng());
  for (index_t k = 0; k < 10; k += 2) {
    __m512i got[2], want[2];
    kt::detail::load_kpair_vbmi(codes.data(), k, K, got);
    kt::detail::load_kpair_shuffled(codes.data(), k, K, want);
    for (int h = 0; h < 2; ++h) {
      alignas(64) std::uint16_t g[32], w[32];
      _mm512_store_si512(g, got[h]);
      _mm512_store_si512(w, want[h]);
      for (int i = 0; i < 32; ++i) ASSERT_EQ(g[i], w[i]) << "k=" << k << " half " << h << " word " << i;
      if (k >= K) {
        for (int i = 0; i < 32; ++i) ASSERT_EQ(w[i], 0) << "k=" << k;
      }
    }
  }
}
#endif

TEST(TiledAmx, QuantizedRowsAreTheSchemesValues) {
  // quantize_e4m3_row against polymoe::quantize::fake_quantize_e4m3 (what quant::fp8 and fp8_block
  // compute): for every element, value · its group's scale is the scheme's fp32 value exactly;
  // groups of 128 with a partial last one, and one group per row; a routing weight; an all-zero
  // group (zeros), a group with an infinity (bf16 of the inputs, scale 1); zeros up to n32.
  constexpr index_t n = 300, n32 = 320;
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (const index_t group : {index_t{128}, n}) {
    std::vector<float> x(n);
    for (auto& v : x) v = nd(rng) * std::exp2(static_cast<float>(static_cast<int>(rng() % 12) - 6));
    if (group == 128) {
      std::fill(x.begin() + 128, x.begin() + 256, 0.0f);
      x[270] = -std::numeric_limits<float>::infinity();
    }
    const float wt = 0.7f;
    std::vector<float> want(n);
    for (index_t i = 0; i < n; ++i) want[static_cast<std::size_t>(i)] = x[static_cast<std::size_t>(i)] * wt;
    polymoe::quantize::fake_quantize_e4m3(want, group);
    std::vector<std::uint16_t> row(n32, 0xFFFF);
    std::vector<float> sa(3, -1.0f);
    kt::quantize_e4m3_row(x.data(), wt, n, n32, group, row.data(), sa.data());
    for (index_t i = 0; i < n32; ++i) {
      const float q = codecs::bf16_to_float(row[static_cast<std::size_t>(i)]);
      if (i >= n) {
        ASSERT_EQ(row[static_cast<std::size_t>(i)], 0) << i;
        continue;
      }
      const float w = want[static_cast<std::size_t>(i)], s = sa[static_cast<std::size_t>(i / 128)];
      if (group == 128 && i >= 256) {  // the group with an infinity: bf16 of x · wt, scale 1
        EXPECT_EQ(s, 1.0f);
        EXPECT_EQ(q, codecs::bf16_to_float(codecs::float_to_bf16(x[static_cast<std::size_t>(i)] * wt))) << i;
        continue;
      }
      ASSERT_EQ(q, codecs::e4m3_to_float(codecs::float_to_e4m3_sat(q))) << i << ": not an E4M3 value";
      ASSERT_EQ(q * s, w) << "i=" << i << " group " << group;
    }
    if (group == n) {
      EXPECT_TRUE(sa[0] == sa[1] && sa[1] == sa[2]);
    } else {
      EXPECT_EQ(sa[1], 1.0f);  // the all-zero group
    }
  }
}

TEST(TiledAmx, E4m3SlabDecodesEveryWeightExactly) {
  // A hand-made fp8 panel in kernel::tiled's layout (qpanel.hpp), K = 200 (the last k-block
  // partial): every decoded weight is the bf16 of its E4M3 value at its tile-layout slot, for every
  // code but the NaNs (subnormals and both zeros included), rows past K zero.
  constexpr index_t K = 200;
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(K * 64));
  for (std::size_t i = 0; i < codes.size(); ++i) {
    auto c = static_cast<std::uint8_t>((i * 37) % 256);
    if ((c & 0x7F) == 0x7F) c = static_cast<std::uint8_t>(c - 1);  // no NaN codes in a panel
    codes[i] = c;
  }
  const std::vector<float> scales(static_cast<std::size_t>(2 * 64), 1.0f);
  const kt::QPanel<kt::fp8_format> panel{codes.data(), scales.data(), 1.0f};
  expect_decoded_slab(
      K, [&](index_t kb0, index_t kb1, std::uint16_t* out) { kt::decode_e4m3_slab(panel, K, kb0, kb1, out); },
      [&](index_t k, index_t c) {
        return codecs::float_to_bf16(codecs::e4m3_to_float(codes[static_cast<std::size_t>(k * 64 + c)]));
      });
}

#endif

#if POLYMOE_TILED_AMX_CODE

/// The largest error of c[m][64] against the sum in double of x[i][k] · weight(k, p), relative to
/// the sum of the products' magnitudes.
template <class Weight>
double worst_against_double(index_t m, index_t K, const std::vector<float>& x, Weight&& weight, const float* c) {
  double worst = 0.0;
  for (index_t i = 0; i < m; ++i)
    for (index_t p = 0; p < kt::panel_cols; ++p) {
      double exact = 0.0, mag = 0.0;
      for (index_t k = 0; k < K; ++k) {
        const double t = double(x[static_cast<std::size_t>(i * K + k)]) * weight(k, p);
        exact += t, mag += std::abs(t);
      }
      worst = std::max(worst, std::abs(double(c[i * kt::panel_cols + p]) - exact) / mag);
    }
  return worst;
}

TEST(TiledAmx, Fp8TilesAgreeWithADoubleSum) {
  if (const char* why = kt::amx_unavailable_reason()) GTEST_SKIP() << "no AMX here: " << why;
  // fp8_times_panel against the sum in double of the scheme's fp32 values, K = 300 (three scale
  // groups, the last partial, and a partial last k-block): W8A8 (E4M3 values of the rows with
  // their scales per 128; the products are exact, the tiles' fp32 sums and the scaling round) and
  // weight-only (split fp32 rows, within 2^-17 more).
  constexpr index_t K = 300, K32 = kt::padded_k32(K), groups = 3;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(K * 64));
  for (auto& b : codes) {
    b = static_cast<std::uint8_t>(rng());
    if ((b & 0x7F) == 0x7F) b = 0;
  }
  // 64-byte aligned, as the packed panels' scales are (the kernel loads them with aligned loads)
  kt::AlignedBuffer<float> scales(static_cast<std::size_t>(groups * 64));
  for (std::size_t i = 0; i < scales.size(); ++i) scales.data()[i] = std::exp2(nd(rng)) * 1e-2f;
  const kt::QPanel<kt::fp8_format> panel{codes.data(), scales.data(), 1.0f};
  const auto weight = [&](index_t k, index_t c) {
    return double(codecs::e4m3_to_float(codes[static_cast<std::size_t>(k * 64 + c)]) *
                  scales.data()[(k / 128) * 64 + c]);
  };
  for (const bool w8a8 : {true, false})
    for (const index_t m : {index_t{1}, index_t{4}, index_t{16}, index_t{17}, index_t{48}, index_t{100}}) {
      const index_t lda = (w8a8 ? 1 : 2) * K32 + 32;
      std::vector<float> x(static_cast<std::size_t>(m * K)), sa(static_cast<std::size_t>(m * groups));
      for (auto& v : x) v = nd(rng) * 3.0f;
      kt::AlignedBuffer<std::uint16_t> a(static_cast<std::size_t>((m + 16) * lda));
      std::fill_n(a.data(), a.size(), std::uint16_t{0});
      for (index_t i = 0; i < m; ++i) {
        float* xi = x.data() + i * K;
        if (w8a8) {
          kt::quantize_e4m3_row(xi, 1.0f, K, K32, 128, a.data() + i * lda, sa.data() + i * groups);
          polymoe::quantize::fake_quantize_e4m3(std::span<float>(xi, static_cast<std::size_t>(K)), 128);
        } else {
          kt::split_bf16_row(xi, 1.0f, K, K32, a.data() + i * lda);
        }
      }
      alignas(64) float c[kt::amx_block_rows * kt::panel_cols], steps[kt::amx_block_rows * kt::panel_cols];
      const auto times_panel = [&](float* out, bool row_group) {
        if (w8a8)
          kt::detail::fp8_times_panel<kt::amx::bf16_ops>(m, a.data(), lda, sa.data(), groups, K, panel, out, row_group);
        else
          kt::detail::fp8_times_panel<kt::amx::bf16x2_ops>(m, a.data(), lda, nullptr, groups, K, panel, out, row_group);
      };
      times_panel(c, true);
      // up to 16 rows the row-group loop (decode between products, sums flushed per scale group)
      // and the group steps sum and scale in the same order: the same bits
      times_panel(steps, false);
      EXPECT_EQ(std::memcmp(c, steps, static_cast<std::size_t>(m * kt::panel_cols) * sizeof(float)), 0)
          << (w8a8 ? "W8A8" : "weight-only") << " m=" << m << ": the two loops differ";
      const double worst = worst_against_double(m, K, x, weight, c);
      // fp32 rounding of the values and scales (a few 2^-24 each), of the running sums (K · 2^-24),
      // and for the split rows 2^-17
      EXPECT_LE(worst, (w8a8 ? 0.0 : std::ldexp(1.0, -17)) + 2 * K * std::ldexp(1.0, -24))
          << (w8a8 ? "W8A8" : "weight-only") << " m=" << m;
    }
}

/// Split rows of fp32 values times a decoded E2M1 panel (format F), K = 300 (two slabs, the last
/// k-block partial), against the sum in double of the fp32 values times the weights: the split
/// carries x within 2^-17 |x|, the tiles sum exact products in fp32 (and NVFP4's scale_2 multiplies
/// the sums once). `w4a4` (NVFP4): the rows quantized as quant::nvfp4_w4a4 does instead, entering
/// the tiles as their e2m1 · e4m3 values (exact) with scale_2 per row, against the double sum of the
/// scheme's fp32 values.
template <class F>
void expect_e2m1_tiles_agree_with_a_double_sum(std::uint8_t scale0, int scale_span, float global, bool w4a4 = false) {
  constexpr index_t K = 300, K32 = kt::padded_k32(K);
  const index_t groups = F::groups(K);
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(K * 32)), scales(static_cast<std::size_t>(groups * 64));
  for (auto& b : codes) b = static_cast<std::uint8_t>(rng());
  for (auto& s : scales) s = static_cast<std::uint8_t>(scale0 + rng() % static_cast<unsigned>(scale_span));
  const kt::QPanel<F> panel{codes.data(), scales.data(), global};
  const auto weight = [&](index_t k, index_t c) {
    const auto [byte, shift] = kt::code_position<F>(c);
    const std::uint8_t code = static_cast<std::uint8_t>(codes[static_cast<std::size_t>(k * 32 + byte)] >> shift);
    const std::uint8_t sc = scales[static_cast<std::size_t>((k / F::group) * 64 + c)];
    if constexpr (F::scale == kt::qscale::e8m0)
      return double(codecs::e2m1_to_float(code)) * codecs::e8m0_to_float(sc);
    else
      return double(codecs::e2m1_to_float(code)) * codecs::e4m3_to_float(sc) * global;
  };
  for (const index_t m : {index_t{1}, index_t{3}, index_t{8}, index_t{16}, index_t{17}, index_t{48}}) {
    const index_t lda = (w4a4 ? 1 : 2) * K32 + 32;
    std::vector<float> x(static_cast<std::size_t>(m * K));
    for (auto& v : x) v = nd(rng) * std::exp2(static_cast<float>(static_cast<int>(rng() % 8) - 4));
    kt::AlignedBuffer<std::uint16_t> a(static_cast<std::size_t>((m + 16) * lda));
    std::fill_n(a.data(), a.size(), std::uint16_t{0});
    std::vector<float> sa(static_cast<std::size_t>(m));
    for (index_t i = 0; i < m; ++i) {
      float* xi = x.data() + i * K;
      if (!w4a4) {
        kt::split_bf16_row(xi, 1.0f, K, K32, a.data() + i * lda);
        continue;
      }
      sa[static_cast<std::size_t>(i)] = kt::quantize_nvfp4_tile_row(xi, 1.0f, K, K32, a.data() + i * lda);
      polymoe::quantize::fake_quantize_nvfp4(std::span<float>(xi, static_cast<std::size_t>(K)));  // the scheme's
    }
    alignas(64) float c[kt::amx_block_rows * kt::panel_cols], slabs[kt::amx_block_rows * kt::panel_cols];
    const auto times_panel = [&](float* out, bool row_group) {
      if (w4a4)
        kt::detail::e2m1_block_times_panel<F, kt::amx::bf16_ops>(m, a.data(), lda, sa.data(), K, panel, out, row_group);
      else
        kt::detail::e2m1_block_times_panel(m, a.data(), lda, nullptr, K, panel, out, row_group);
    };
    times_panel(c, true);
    // up to 16 rows the row-group loop (decode between products) and the slab loop sum in the same
    // order: the same bits
    times_panel(slabs, false);
    EXPECT_EQ(std::memcmp(c, slabs, static_cast<std::size_t>(m * kt::panel_cols) * sizeof(float)), 0)
        << (w4a4 ? "W4A4" : "weight-only") << " m=" << m << ": the two loops differ";
    const double worst = worst_against_double(m, K, x, weight, c);
    // 2^-17 for the split (W4A4: the scheme's rounding of each value, 2^-24), fp32 rounding of the
    // running sums (2K terms: 2K · 2^-24) and of the scales' products
    EXPECT_LE(worst, std::ldexp(1.0, w4a4 ? -24 : -17) + (2 * K + 3) * std::ldexp(1.0, -24))
        << (w4a4 ? "W4A4" : "weight-only") << " m=" << m;
  }
}

TEST(TiledAmx, E2m1TilesAgreeWithADoubleSum) {
  if (const char* why = kt::amx_unavailable_reason()) GTEST_SKIP() << "no AMX here: " << why;
  expect_e2m1_tiles_agree_with_a_double_sum<kt::mxfp4_format>(120, 10, 1.0f);
  // E4M3 scales from subnormal (code 1) to 448 (0x7E), and zero
  expect_e2m1_tiles_agree_with_a_double_sum<kt::nvfp4_format>(0, 127, 3.1e-3f);
  expect_e2m1_tiles_agree_with_a_double_sum<kt::nvfp4_format>(0, 127, 3.1e-3f, true);
}

TEST(TiledAmx, HiTermAloneGivesTheBitsOfBothTermsOnBf16Rows) {
  // Rows of bf16 values (zeros of both signs, an infinity) split into hi and lo (lo all zero)
  // times an MXFP4, an NVFP4 and an fp8 panel, K = 300: amx::bf16x2_hi_ops (the hi terms alone)
  // gives bf16x2_ops' bits, in the row-group loop and the slab loop (E2M1) and in fp8's groups.
  if (const char* why = kt::amx_unavailable_reason()) GTEST_SKIP() << "no AMX here: " << why;
  constexpr index_t K = 300, K32 = kt::padded_k32(K), lda = 2 * K32 + 32;
  std::mt19937 rng(15);
  std::normal_distribution<float> nd;
  std::vector<std::uint8_t> codes4(static_cast<std::size_t>(K * 32)), codes8(static_cast<std::size_t>(K * 64));
  for (auto& b : codes4) b = static_cast<std::uint8_t>(rng());
  for (auto& b : codes8) {
    b = static_cast<std::uint8_t>(rng());
    if ((b & 0x7F) == 0x7F) b = 0;  // no NaN codes in a panel
  }
  std::vector<std::uint8_t> e8m0(static_cast<std::size_t>(10 * 64)), e4m3(static_cast<std::size_t>(19 * 64));
  for (auto& s : e8m0) s = static_cast<std::uint8_t>(120 + rng() % 10);
  for (auto& s : e4m3) s = static_cast<std::uint8_t>(rng() % 127);
  kt::AlignedBuffer<float> fp8_scales(static_cast<std::size_t>(3 * 64));  // aligned, as packed panels' are
  for (std::size_t i = 0; i < fp8_scales.size(); ++i) fp8_scales.data()[i] = std::exp2(nd(rng)) * 1e-2f;
  const kt::QPanel<kt::mxfp4_format> mx{codes4.data(), e8m0.data(), 1.0f};
  const kt::QPanel<kt::nvfp4_format> nv{codes4.data(), e4m3.data(), 0.37f};
  const kt::QPanel<kt::fp8_format> f8{codes8.data(), fp8_scales.data(), 1.0f};
  for (const index_t m : {index_t{1}, index_t{3}, index_t{8}, index_t{16}, index_t{17}, index_t{48}}) {
    kt::AlignedBuffer<std::uint16_t> a(static_cast<std::size_t>((m + 16) * lda));
    std::fill_n(a.data(), a.size(), std::uint16_t{0});
    std::vector<float> x(static_cast<std::size_t>(K));
    for (index_t i = 0; i < m; ++i) {
      for (auto& v : x) v = codecs::bf16_to_float(codecs::float_to_bf16(nd(rng) * 4.0f));
      x[0] = -0.0f, x[1] = 0.0f;
      if (i == 2) x[5] = std::numeric_limits<float>::infinity();
      ASSERT_TRUE(kt::split_bf16_row(x.data(), 1.0f, K, K32, a.data() + i * lda)) << "row " << i;
    }
    alignas(64) float both[kt::amx_block_rows * kt::panel_cols], one[kt::amx_block_rows * kt::panel_cols];
    const auto same = [&](const char* what) {
      EXPECT_EQ(std::memcmp(both, one, static_cast<std::size_t>(m * kt::panel_cols) * sizeof(float)), 0)
          << what << " m=" << m;
    };
    for (const bool row_group : {true, false}) {
      kt::detail::e2m1_block_times_panel<kt::mxfp4_format, kt::amx::bf16x2_ops>(m, a.data(), lda, nullptr, K, mx, both, row_group);
      kt::detail::e2m1_block_times_panel<kt::mxfp4_format, kt::amx::bf16x2_hi_ops>(m, a.data(), lda, nullptr, K, mx, one, row_group);
      same(row_group ? "MXFP4, row-group loop" : "MXFP4, slab loop");
      kt::detail::e2m1_block_times_panel<kt::nvfp4_format, kt::amx::bf16x2_ops>(m, a.data(), lda, nullptr, K, nv, both, row_group);
      kt::detail::e2m1_block_times_panel<kt::nvfp4_format, kt::amx::bf16x2_hi_ops>(m, a.data(), lda, nullptr, K, nv, one, row_group);
      same(row_group ? "NVFP4, row-group loop" : "NVFP4, slab loop");
    }
    kt::detail::fp8_times_panel<kt::amx::bf16x2_ops>(m, a.data(), lda, nullptr, 3, K, f8, both);
    kt::detail::fp8_times_panel<kt::amx::bf16x2_hi_ops>(m, a.data(), lda, nullptr, 3, K, f8, one);
    same("fp8 weight-only");
  }
}

#endif

}  // namespace
