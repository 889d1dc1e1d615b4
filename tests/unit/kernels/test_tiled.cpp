// kernel::tiled against the reference on the shapes where a tiled kernel goes wrong: row-block and
// tile boundaries, sizes that are not multiples of the panel, decode batches, thread counts, and
// no heap allocation per forward after warm-up.
#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include "test_util.hpp"

// Counts global operator new calls while `counting` is set (this test binary only). GCC cannot see
// that the replaced new and delete below are a malloc / free pair.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
// The cache-line-aligned forms (the workspace's buffers, AlignedBuffer) count the same way.
void* operator new(std::size_t n, std::align_val_t a) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  const auto align = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(align, (std::max<std::size_t>(n, 1) + align - 1) / align * align)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

using namespace polymoe;

namespace {

namespace kt = kernels::tiled;

template <class Q>
void expect_agrees(const MoeConfig& cfg, const Matrix& hidden, const Routing& r, unsigned seed) {
  std::mt19937 rng(seed);
  const MoeWeights w = test::random_weights(rng, cfg);
  MoeLayer<a2a::local, Q, kernel::reference> ref(cfg, w);
  MoeLayer<a2a::local, Q, kernel::tiled> layer(cfg, w);
  const Matrix want = ref.forward_routed(hidden, r.ids, r.weights);
  const Matrix got = layer.forward_routed(hidden, r.ids, r.weights);
  EXPECT_LE(test::kernel_agreement_error<Q>(got, want), test::kernel_tolerance<Q>)
      << Q::name << " T=" << hidden.rows() << " H=" << cfg.hidden << " I=" << cfg.intermediate
      << " act=" << to_string(cfg.activation);
}

/// Every scheme kernel::tiled implements; the portable build takes one scheme per code path
/// (fp8 and fp8_block widen E4M3 alike; fp8_block_weight_only, nvfp4_w4a4 and the W4A16 schemes
/// differ from a scheme it runs only in their inputs) to keep its compile time, which the explicit
/// instances do not share.
template <class F>
void for_every_scheme(F&& f) {
  f.template operator()<quant::fp32>();
  f.template operator()<quant::bf16>();
  f.template operator()<quant::fp8_block>();
  f.template operator()<quant::int8_w8a8>();
  f.template operator()<quant::mxfp4>();
  f.template operator()<quant::nvfp4>();
#if !defined(POLYMOE_TILED_PORTABLE)
  f.template operator()<quant::fp8>();
  f.template operator()<quant::fp8_block_weight_only>();
  f.template operator()<quant::nvfp4_w4a4>();  // nvfp4's panels; its quantizer is the scheme's there
  f.template operator()<quant::mxfp4_w4a16>();  // mxfp4's panels, rows rounded to bf16
  f.template operator()<quant::nvfp4_w4a16>();
#endif
}

#if !defined(POLYMOE_TILED_AVX512) && !defined(POLYMOE_TILED_PORTABLE)
// On a build whose compiler does not target AVX-512F, the production micro-kernels (and the tests
// below that #if on them) are not compiled at all: say so in the test report instead of silently.
TEST(Tiled, Avx512MicroKernelsOfThisBuild) {
  GTEST_SKIP() << "the compiler does not target AVX-512F here, so the AVX-512 micro-kernels and their tests are "
                  "not in this build; the portable loop runs instead";
}
#endif

/// The blocks sort_by_expert cuts for one expert that gets every slot of `rows` tokens (k = 1).
std::vector<index_t> cut_sizes(index_t rows, kt::BlockCut cut) {
  IdMatrix ids(rows, 1);
  ids.setZero();
  kt::ExpertRows s;
  kt::sort_by_expert(ids, 2, cut, s);
  std::vector<index_t> sizes;
  index_t next = 0;
  for (const kt::RowBlock& b : s.blocks) {
    EXPECT_EQ(b.expert, 0);
    EXPECT_EQ(b.begin, next) << "blocks must tile the expert's rows in order";
    next += b.rows;
    sizes.push_back(b.rows);
  }
  EXPECT_EQ(next, rows);
  return sizes;
}

TEST(Tiled, BlockCuts) {
  using V = std::vector<index_t>;
  // Fixed cut (kernel::tiled): blocks of max_rows and a remainder.
  EXPECT_EQ(cut_sizes(130, {48}), (V{48, 48, 34}));
  EXPECT_EQ(cut_sizes(48, {48}), (V{48}));
  EXPECT_EQ(cut_sizes(0, {48}), V{});
  // Balanced cut in multiples of 16 (AMX): as few blocks as max_rows allows, none left tiny.
  EXPECT_EQ(cut_sizes(130, {128, 16}), (V{80, 50}));
  EXPECT_EQ(cut_sizes(128, {128, 16}), (V{128}));
  EXPECT_EQ(cut_sizes(129, {128, 16}), (V{80, 49}));
  EXPECT_EQ(cut_sizes(257, {128, 16}), (V{96, 96, 65}));
  EXPECT_EQ(cut_sizes(20, {128, 16}), (V{20}));
  EXPECT_EQ(cut_sizes(0, {128, 16}), V{});
}

// GEMM 2 streams y past the caches when y and the weights the pipeline streams after it (those of
// the experts with rows) do not fit in the last-level cache together: the Qwen3-30B-A3B layer's
// figures (bf16 expert 9.4 MB) on the device machine's two LLCs (105 MiB, 300 MiB).
TEST(Tiled, YIsStreamedWhenItAndTheWeightsOutgrowTheLastLevelCache) {
  IdMatrix ids(3, 2);
  ids << 0, 3, 3, 5, 0, 5;  // experts 0, 3, 5 of 8
  kt::ExpertRows s;
  kt::sort_by_expert(ids, 8, {128, 16}, s);
  EXPECT_EQ(s.experts_with_rows(), 3);
  const std::size_t expert = 3 * 2048 * 768 * 2, MiB = std::size_t{1} << 20;
  const auto y = [](std::size_t T) { return T * 8 * 2048 * 4; };
  for (const std::size_t llc : {105 * MiB, 300 * MiB}) {
    EXPECT_TRUE(kt::detail::streams_y(y(512), 128 * expert, llc)) << llc;   // y 34 MB, weights 1.2 GB
    EXPECT_TRUE(kt::detail::streams_y(y(2048), 128 * expert, llc)) << llc;  // y 134 MB
    EXPECT_FALSE(kt::detail::streams_y(y(1), 8 * expert, llc)) << llc;      // decode: 75.5 MB + 64 KiB
  }
  EXPECT_FALSE(kt::detail::streams_y(y(512), 4 * expert, 300 * MiB));  // weights that stay cached
  EXPECT_TRUE(kt::detail::streams_y(y(2048), 0, 105 * MiB));           // y alone larger than the LLC
}

// The top-k sum reads a token's rows of y in steps of columns, slot after slot (detail::sum_span):
// each output element is still 0 + y[slot 0] + y[slot 1] + ... in slot order, at every step — a
// hidden size that no step divides, slots computed elsewhere (-1) and tokens with none here.
TEST(Tiled, TopKSumAddsTheSlotsInOrderAtEveryStep) {
  constexpr index_t T = 37, k = 3, E = 5, H = 200;
  std::mt19937 rng(12);
  std::uniform_int_distribution<int> expert(-1, E - 1);
  IdMatrix ids(T, k);
  for (index_t t = 0; t < T; ++t)
    for (index_t j = 0; j < k; ++j) ids(t, j) = t % 7 == 0 ? -1 : expert(rng);
  kt::ExpertRows s;
  kt::sort_by_expert(ids, E, {128, 16}, s);
  std::uniform_real_distribution<float> u(-1e3f, 1e3f);
  kt::AlignedVector<float> y(static_cast<std::size_t>(s.rows() * H));
  for (float& v : y) v = u(rng);
  Matrix want = Matrix::Zero(T, H);
  for (index_t t = 0; t < T; ++t)
    for (index_t c = 0; c < H; ++c) {
      float sum = 0.0f;
      for (index_t j = 0; j < k; ++j)
        if (ids(t, j) >= 0) sum += y[static_cast<std::size_t>(s.row_of[static_cast<std::size_t>(t * k + j)] * H + c)];
      want(t, c) = sum;
    }
  int& knob = kt::detail::sum_span_knob();
  const int saved = knob;
  for (const int span : {-1, 16, 48, 64, 1 << 30}) {
    knob = span;
    Matrix got = Matrix::Constant(T, H, 7.0f);
    kt::sum_slots(s, y, k, got);
    EXPECT_TRUE((got.array() == want.array()).all()) << "span " << span;
  }
  knob = saved;
}

TEST(Tiled, RowBlockAndTileBoundaries) {
  // Expert 0 gets n rows (every token's slot 0), the other slot goes elsewhere.
  const index_t B = kt::block_rows, M = kt::max_tile_rows, L = kt::max_tall_rows;
  for (index_t n : {index_t{1}, index_t{2}, index_t{3}, M - 1, M, M + 1, L - 1, L, L + 1, 2 * L + 1, B - 1, B, B + 1,
                    2 * B + 5}) {
    const MoeConfig cfg = test::moe_config(40, 24, 5, 2);
    std::mt19937 rng(static_cast<unsigned>(n));
    const Matrix hidden = test::random_matrix(rng, n, cfg.hidden);
    Routing r = test::random_routing(rng, n, cfg.num_experts, 2);
    for (index_t t = 0; t < n; ++t) {
      if (r.ids(t, 1) == 0) std::swap(r.ids(t, 0), r.ids(t, 1));
      r.ids(t, 0) = 0;
      if (r.ids(t, 1) == 0) r.ids(t, 1) = 1;
    }
    SCOPED_TRACE(n);
    for_every_scheme([&]<class Q>() { expect_agrees<Q>(cfg, hidden, r, 11u); });
  }
}

#if defined(POLYMOE_TILED_AVX512)
TEST(Tiled, TallBf16TilesMatchTheSquareTileBitForBit) {
  // bf16 blocks run row groups of up to 12 rows against half panels (tall_tile); each result is
  // the same k-ordered FMA chain as the 6 x 64 tile's, so the two must agree exactly, across a
  // slab boundary (K > k_block) and for every row count of a group.
  using W = std::uint16_t;
  constexpr index_t K = kt::k_block<W> + 37;
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<W, kt::CacheLineAllocator<W>> panel(static_cast<std::size_t>(2 * K * kt::panel_cols));  // + a next panel
  for (W& w : panel) w = codecs::float_to_bf16(u(rng));
  std::vector<std::vector<float>> a(kt::max_tall_rows, std::vector<float>(static_cast<std::size_t>(K)));
  for (auto& row : a)
    for (float& x : row) x = u(rng);
  for (int m = 1; m <= kt::max_tall_rows; ++m) {
    alignas(64) float tall[kt::max_tall_rows * kt::panel_cols], square[kt::max_tall_rows * kt::panel_cols];
    const float* rows[kt::max_tall_rows];
    for (int i = 0; i < m; ++i) rows[i] = a[static_cast<std::size_t>(i)].data();
    for (index_t k0 = 0; k0 < K; k0 += kt::k_block<W>) {
      const index_t k1 = std::min(K, k0 + kt::k_block<W>);
      for (index_t h = 0; h < 2; ++h)
        kt::tall_rows(m, rows, k0, k1, panel.data() + h * 32, tall + h * 32, k0 > 0,
                      reinterpret_cast<const char*>(panel.data() + k1 * kt::panel_cols), h, 2);
      for (int r0 = 0; r0 < m; r0 += kt::max_tile_rows)
        kt::tile_rows(std::min(kt::max_tile_rows, m - r0), rows + r0, k0, k1, panel.data(),
                      square + r0 * kt::panel_cols, k0 > 0, nullptr, 0);
    }
    for (int i = 0; i < m * kt::panel_cols; ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(tall[i]), std::bit_cast<std::uint32_t>(square[i]))
          << "rows " << m << ", element " << i;
  }
}
#endif

TEST(Tiled, SizesThatAreNotMultiplesOfThePanel) {
  const Activation acts[] = {Activation::silu_gated, Activation::gelu_gated, Activation::swiglu_oai,
                             Activation::silu, Activation::relu2};
  struct HI {
    index_t H, I;
  };
  for (const HI hi : {HI{1, 1}, HI{17, 15}, HI{70, 37}, HI{65, 33}, HI{130, 65}, HI{64, 32}, HI{257, 97}})
    for (const Activation a : acts)
      for (const bool bias : {false, true}) {
        if (a == Activation::swiglu_oai && !bias) continue;
        const MoeConfig cfg = test::moe_config(hi.H, hi.I, 6, 3, a, bias);
        std::mt19937 rng(static_cast<unsigned>(hi.H * 31 + hi.I));
        const Matrix hidden = test::random_matrix(rng, 29, hi.H);
        const Routing r = test::random_routing(rng, 29, 6, 3);
        for_every_scheme([&]<class Q>() { expect_agrees<Q>(cfg, hidden, r, 5u); });
      }
}

TEST(Tiled, DecodeBatches) {
  for (index_t T = 1; T <= 4; ++T) {
    const MoeConfig cfg = test::moe_config(256, 96, 16, 4);
    std::mt19937 rng(static_cast<unsigned>(T));
    const Matrix hidden = test::random_matrix(rng, T, cfg.hidden);
    const Routing r = test::random_routing(rng, T, 16, 4);
    for_every_scheme([&]<class Q>() { expect_agrees<Q>(cfg, hidden, r, 3u); });
  }
}

TEST(Tiled, WeightOnInput) {
  MoeConfig cfg = test::moe_config(33, 20, 4, 1);
  cfg.router_weight_on_input = true;
  std::mt19937 rng(4);
  const Matrix hidden = test::random_matrix(rng, 23, cfg.hidden);
  const Routing r = test::random_routing(rng, 23, 4, 1);
  for_every_scheme([&]<class Q>() { expect_agrees<Q>(cfg, hidden, r, 9u); });
}

TEST(Tiled, SkippedSlots) {
  // Local id -1 (a slot routed to another rank) contributes nothing.
  const MoeConfig cfg = test::moe_config(48, 20, 4, 3);
  std::mt19937 rng(6);
  const MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, 19, cfg.hidden);
  Routing r = test::random_routing(rng, 19, 4, 3);
  for (index_t t = 0; t < 19; t += 2) r.ids(t, 1) = -1;
  const auto prepared = kernel::tiled::prepare<quant::fp32>(quant::fp32::quantize(w.experts));
  Matrix want(19, cfg.hidden), got(19, cfg.hidden);
  const ExpertMlp mlp{ActivationParams{}, false};
  const DispatchOutput<format::standard> d{hidden, r.ids, r.weights, 4};
  kernels::reference_standard<quant::fp32>(d, quant::fp32::quantize(w.experts), mlp, want);
  kernel::tiled{}.run<quant::fp32>(d, prepared, mlp, CombineInput<format::standard>{got});
  EXPECT_LE(test::relative_error(got, want), test::kernel_tolerance<quant::fp32>);
}

TEST(Tiled, BitwiseIndependentOfThreadCount) {
  // Several row blocks per expert, partial tiles and decode-sized experts in one batch.
  const MoeConfig cfg = test::moe_config(200, 72, 8, 2, Activation::swiglu_oai, true);
  std::mt19937 rng(21);
  const MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, 301, cfg.hidden);
  Routing r = test::random_routing(rng, 301, 8, 2);
  for (index_t t = 0; t < 301; ++t)  // skew: expert 7 almost never, expert 0 often
    if (r.ids(t, 0) == 7 && t % 50) r.ids(t, 0) = r.ids(t, 1) == 0 ? 1 : 0;
  for_every_scheme([&]<class Q>() {
    MoeLayer<a2a::local, Q, kernel::tiled> layer(cfg, w);
    Matrix first;
    for (int threads : {1, 2, 3, 7}) {
      tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
      const Matrix out = layer.forward_routed(hidden, r.ids, r.weights);
      if (first.size() == 0)
        first = out;
      else
        EXPECT_TRUE((out.array() == first.array()).all()) << Q::name << ", " << threads << " threads";
    }
  });
}

TEST(Tiled, NoHeapAllocationAfterWarmUp) {
  // The counter itself counts.
  allocations = 0;
  counting = true;
  int* volatile probe = new int(1);
  delete probe;
  counting = false;
  ASSERT_EQ(allocations.load(), 1);
  const MoeConfig cfg = test::moe_config(96, 40, 8, 2);
  std::mt19937 rng(2);
  const MoeWeights w = test::random_weights(rng, cfg);
  for_every_scheme([&]<class Q>() {
    const auto prepared = kernel::tiled::prepare<Q>(Q::quantize(w.experts));
    const ExpertMlp mlp{ActivationParams{}, false};
    for (index_t T : {index_t{1}, index_t{64}}) {
      const Matrix hidden = test::random_matrix(rng, T, cfg.hidden);
      const Routing r = test::random_routing(rng, T, 8, 2);
      Matrix out(T, cfg.hidden);
      const DispatchOutput<format::standard> d{hidden, r.ids, r.weights, 8};
      const kernel::tiled k;
      k.run<Q>(d, prepared, mlp, CombineInput<format::standard>{out});  // warm-up
      allocations = 0;
      counting = true;
      for (int i = 0; i < 3; ++i) k.run<Q>(d, prepared, mlp, CombineInput<format::standard>{out});
      counting = false;
      EXPECT_EQ(allocations.load(), 0) << Q::name << " T=" << T;
    }
  });
}

/// The VmFlags line of the mapping of /proc/self/smaps that holds `p` ("" when none does).
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= addr && addr < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line + " ";
    }
  }
  return "";
}

TEST(Tiled, LargeBuffersGetHugePagesSmallOnesCacheLines) {
  const bool off = kt::detail::env_switch("POLYMOE_HUGE_PAGES") == 0;
  const kt::AlignedBuffer<float> small(100);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small.data()) % kt::cache_line, 0u);
  const std::size_t n = (std::size_t{5} << 20) / sizeof(float);  // 5 MiB
  const kt::AlignedBuffer<float> large(n);
  kt::AlignedVector<float> grown;
  grown.resize(n);
  for (const float* p : {large.data(), static_cast<const float*>(grown.data())}) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % (off ? kt::cache_line : kt::detail::huge_page), 0u);
#if defined(__linux__)
    const std::string flags = vm_flags_of(p);
    ASSERT_FALSE(flags.empty()) << "no mapping in /proc/self/smaps holds the buffer";
    EXPECT_EQ(flags.find(" hg ") != std::string::npos, !off) << flags;
#endif
  }
  EXPECT_TRUE(std::all_of(large.data(), large.data() + n, [](float v) { return v == 0.0f; }));
}

TEST(Tiled, KnobsOfTheEnvironmentParseWholeWordsAndNumbersOnly) {
  // A knob that is not understood is reported on stderr and ignored, never taken as "on" or as 0.
  const char* name = "POLYMOE_TEST_KNOB";
  const auto with = [&](const char* value, auto read) {
    ::setenv(name, value, 1);
    testing::internal::CaptureStderr();
    const auto got = read(name);
    const std::string err = testing::internal::GetCapturedStderr();
    ::unsetenv(name);
    return std::pair{got, err};
  };
  const auto sw = [](const char* n) { return kt::detail::env_switch(n); };
  const auto num = [](const char* n) { return kt::detail::env_number(n); };
  EXPECT_EQ(sw(name), -1);
  for (const char* off : {"0", "off", "False", "NO"}) EXPECT_EQ(with(off, sw), std::pair(0, std::string())) << off;
  for (const char* on : {"1", "ON", "true", "yes"}) EXPECT_EQ(with(on, sw), std::pair(1, std::string())) << on;
  const auto [bad, said] = with("maybe", sw);
  EXPECT_EQ(bad, -1);
  EXPECT_EQ(said, "polymoe: ignoring POLYMOE_TEST_KNOB=maybe: expected 0 or 1\n");
  EXPECT_EQ(with("64", num).first, std::optional<long>(64));
  EXPECT_EQ(with("-5", num).first, std::optional<long>(-5));
  for (const char* junk : {"", "abc", "12x", " 12", "4294967312", "0x10"}) {
    const auto [v, err] = with(junk, num);
    EXPECT_FALSE(v.has_value()) << junk;
    EXPECT_NE(err.find("polymoe: ignoring POLYMOE_TEST_KNOB="), std::string::npos) << junk;
  }
}

TEST(Tiled, PhaseTimesCoverTheForward) {
  const MoeConfig cfg = test::moe_config(96, 40, 8, 2);
  std::mt19937 rng(5);
  const MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, 64, cfg.hidden);
  const Routing r = test::random_routing(rng, 64, 8, 2);
  const auto check = [&]<class Q>() {
    const auto prepared = kernel::tiled::prepare<Q>(Q::quantize(w.experts));
    const ExpertMlp mlp{ActivationParams{}, false};
    Matrix out(64, cfg.hidden);
    const DispatchOutput<format::standard> d{hidden, r.ids, r.weights, 8};
    kt::PhaseTimes t;
    kt::phase_times = &t;
    const auto t0 = std::chrono::steady_clock::now();
    kernel::tiled{}.run<Q>(d, prepared, mlp, CombineInput<format::standard>{out});
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    kt::phase_times = nullptr;
    EXPECT_EQ(t.forwards, 1) << Q::name;
    double total = 0.0;
    for (const double s : t.seconds) {
      EXPECT_GE(s, 0.0) << Q::name;
      total += s;
    }
    EXPECT_GT(t.seconds[kt::PhaseTimes::gemm1], 0.0) << Q::name;
    EXPECT_GT(t.seconds[kt::PhaseTimes::gemm2], 0.0) << Q::name;
    EXPECT_GT(t.seconds[kt::PhaseTimes::sum], 0.0) << Q::name << ": the last phase must be charged too";
    EXPECT_LE(total, elapsed) << Q::name;
    kernel::tiled{}.run<Q>(d, prepared, mlp, CombineInput<format::standard>{out});  // sink unset: not recorded
    EXPECT_EQ(t.forwards, 1) << Q::name;
  };
  check.template operator()<quant::bf16>();
  check.template operator()<quant::int8_w8a8>();
}

TEST(Tiled, VectorBf16RoundingIsTheCodec) {
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, 1.0f + 1.0f / 256.0f, -3.5e-39f,
                           std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0x7F800001u),
                           std::bit_cast<float>(0xFF812345u), std::numeric_limits<float>::max(), 3.3895314e38f};
  std::mt19937 rng(1);
  for (int i = 0; i < 1000; ++i) xs.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  std::vector<float> want = xs, got = xs;
  quant::bf16::quantize_activation(want);
  kt::round_bf16(got.data(), static_cast<index_t>(got.size()));
  for (std::size_t i = 0; i < xs.size(); ++i)
    EXPECT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i])) << i;
}

TEST(Tiled, VectorSiluIsTheScalarToAFewUlps) {
  // x · sigmoid(x) with the vector exp (epilogue.hpp) against act::silu: within 4 ulps, and below
  // 1e-35 where the true value is that small (x < -80); NaN and infinities as the scalar.
  constexpr float inf = std::numeric_limits<float>::infinity();
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 1e-30f, -1e-30f, 20.0f, -20.0f, 80.0f, -80.0f, -87.0f, -88.5f,
                           -89.0f, -100.0f, -1e6f, 1e6f, inf, -inf, std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> wide(-120.0f, 120.0f), narrow(-8.0f, 8.0f);
  for (int i = 0; i < 20000; ++i) xs.push_back(i % 2 ? wide(rng) : narrow(rng));
  const auto n = static_cast<index_t>(xs.size());
  std::vector<float> got(xs.size()), gated(xs.size()), ones(xs.size(), 1.0f);
  kt::activate<false>(ActivationParams{Activation::silu}, xs.data(), nullptr, got.data(), n);
  kt::activate<false>(ActivationParams{Activation::silu_gated}, xs.data(), ones.data(), gated.data(), n);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const float want = act::silu(xs[i]);
    for (const float g : {got[i], gated[i]}) {
      if (std::isnan(want) || std::isinf(want)) {
        EXPECT_EQ(std::bit_cast<std::uint32_t>(g) & 0x7FC00000u, std::bit_cast<std::uint32_t>(want) & 0x7FC00000u)
            << "x " << xs[i];
        continue;
      }
      const float ulp = std::nextafter(std::fabs(want), inf) - std::fabs(want);
      if (std::fabs(want) < 1e-35f)
        EXPECT_LT(std::fabs(g), 1e-35f) << "x " << xs[i];
      else
        EXPECT_LE(std::fabs(g - want), 4 * ulp) << "x " << xs[i] << " got " << g << " want " << want;
    }
  }
}

TEST(Tiled, Int8ActivationCodesAreThePolicyAtEveryScale) {
  // quantize_row_u8 divides through the reciprocal of the scale for 2^-100 <= s <= 2^100 and by
  // the scale outside: every code is the policy's (round_to_int8(x / s)) either way, ties included.
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const float amax : {1e-35f, 1e-30f, 1e-12f, 3e-5f, 0.7f, 1.0f, 127.0f, 3e4f, 1e20f, 1e30f, 1e33f, 3e38f}) {
    const float s = kernels::quantize::int8_scale(amax);
    std::vector<float> x;
    x.push_back(amax);
    for (int n = -127; n < 127; ++n) {  // ties and their neighbours
      const float t = (static_cast<float>(n) + 0.5f) * s;
      x.insert(x.end(), {std::nextafter(t, -3e38f), t, std::nextafter(t, 3e38f)});
    }
    for (int i = 0; i < 3000; ++i) x.push_back(amax * u(rng));
    for (int i = 0; i < 100; ++i) x.push_back(amax * 1e-6f * u(rng));  // small against the scale
    for (float& v : x) v = std::clamp(v, -amax, amax);  // the scale stays amax / 127
    const auto n = static_cast<index_t>(x.size());
    std::vector<std::uint8_t> q(static_cast<std::size_t>(kt::padded_k(n)));
    const float got_s = kt::quantize_row_u8(x.data(), n, kt::padded_k(n), q.data());
    EXPECT_EQ(got_s, s) << "amax " << amax;
    EXPECT_EQ(kt::quantizer_reciprocal(s), amax > 1e-30f && amax < 1e32f) << "amax " << amax;
    for (index_t i = 0; i < n; ++i)
      ASSERT_EQ(static_cast<int>(q[static_cast<std::size_t>(i)]) - 128, kernels::quantize::round_to_int8(x[i] / s))
          << "amax " << amax << " x " << x[i];
  }
}

TEST(Tiled, QuotientByReciprocalIsTheDivision) {
#if defined(POLYMOE_TILED_AVX512)
  // bit for bit where |x / s| >= 2^-8, for scales across quantizer_reciprocal's range
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f), q(-128.0f, 128.0f);
  long checked = 0;
  for (int e = -100; e < 100; e += 3) {
    const float s = std::ldexp(mant(rng), e);
    const __m512 vs = _mm512_set1_ps(s), vr = _mm512_set1_ps(1.0f / s);
    for (int i = 0; i < 2000; ++i) {
      alignas(64) float x[16], got[16];
      for (float& v : x) {
        v = q(rng) * s;
        if (std::fabs(v / s) < 0x1p-8f) v = s;
      }
      _mm512_store_ps(got, kt::quotient_by_reciprocal(_mm512_load_ps(x), vs, vr));
      for (int j = 0; j < 16; ++j, ++checked)
        ASSERT_EQ(std::bit_cast<std::uint32_t>(got[j]), std::bit_cast<std::uint32_t>(x[j] / s))
            << "s " << s << " x " << x[j];
    }
  }
  EXPECT_GT(checked, 1000000);
#else
  GTEST_SKIP() << "quotient_by_reciprocal is the AVX-512 path; this build has none";
#endif
}

// ---- quantized panels: the widened weight is the codec's value, for every code ----------------

template <class F, class Expect>
void expect_widening(std::uint8_t max_code, Expect expect) {
  // One panel of K k-rows: k-row k holds code (k + c) % (max_code + 1) in column c, and every
  // group's scales cycle through their codes too.
  const index_t K = 4 * F::group;
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(K * F::row_bytes), 0);
  kt::AlignedBuffer<typename F::scale_type> scales(static_cast<std::size_t>(F::groups(K) * kt::panel_cols));
  const auto code_at = [&](index_t k, index_t c) {
    const auto q = static_cast<std::uint8_t>((k + c) % (max_code + 1));
    // E4M3's NaN codes (0x7F, 0xFF) never reach a kernel: the policies reject them at load.
    return F::code == kt::qcode::e4m3 && (q & 0x7F) == 0x7F ? static_cast<std::uint8_t>(q - 1) : q;
  };
  for (index_t k = 0; k < K; ++k)
    for (index_t c = 0; c < kt::panel_cols; ++c) {
      const auto [byte, shift] = kt::code_position<F>(c);
      codes[static_cast<std::size_t>(k * F::row_bytes + byte)] |= static_cast<std::uint8_t>(code_at(k, c) << shift);
    }
  for (std::size_t i = 0; i < scales.size(); ++i) {
    if constexpr (F::scale == kt::qscale::f32)
      scales.data()[i] = 0.001f * static_cast<float>(i + 1);
    else if constexpr (F::scale == kt::qscale::e8m0)
      scales.data()[i] = static_cast<std::uint8_t>((i * 37) % 255);  // every code but the NaN 0xFF
    else
      scales.data()[i] = static_cast<std::uint8_t>((i * 37) % 127);  // positive E4M3 codes, no NaN 0x7F
  }
  const kt::QPanel<F> panel{codes.data(), scales.data(), 0.37f};
  alignas(64) float slab[4 * 128 * kt::panel_cols];
  kt::expand(panel, 0, K, slab);
  int wrong = 0;
  for (index_t k = 0; k < K; ++k)
    for (index_t c = 0; c < kt::panel_cols; ++c) {
      const float want = expect(code_at(k, c), scales.data()[(k / F::group) * kt::panel_cols + c], panel.global);
      const float got = slab[k * kt::panel_cols + c];
      if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(want) && ++wrong <= 5)
        ADD_FAILURE() << "k " << k << " column " << c << ": " << got << " != " << want;
    }
  EXPECT_EQ(wrong, 0);
}

TEST(Tiled, QuantizedPanelsWidenToTheCodecValues) {
  // E4M3: 0..0x7E and 0x80..0xFE (no NaN); fp32 scale.
  expect_widening<kt::fp8_format>(0xFF, [](std::uint8_t q, float s, float) { return codecs::e4m3_to_float(q) * s; });
  expect_widening<kt::mxfp4_format>(15, [](std::uint8_t q, std::uint8_t s, float) {
    return codecs::e2m1_to_float(q) * codecs::e8m0_to_float(s);
  });
  expect_widening<kt::nvfp4_format>(15, [](std::uint8_t q, std::uint8_t s, float g) {
    return codecs::e2m1_to_float(q) * codecs::e4m3_to_float(s) * g;
  });
}

/// Blocks of 3 and 4 rows on a quantized panel of format F (block_times_panel: qtile, the weights
/// widened in registers) give the bits of the slab path (expand a slab into L1, tile<M> over it),
/// over K = 300 and 1000 (partial scale groups and slabs), random codes and scales.
template <class F>
void expect_register_tiles_are_the_slab_paths_bits() {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  for (const index_t K : {index_t{300}, index_t{1000}}) {
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(K * F::row_bytes));
    for (auto& b : codes) {
      b = static_cast<std::uint8_t>(rng());
      if (F::code == kt::qcode::e4m3 && (b & 0x7F) == 0x7F) b = 0x38;  // no NaN codes
    }
    kt::AlignedBuffer<typename F::scale_type> scales(static_cast<std::size_t>(F::groups(K) * kt::panel_cols));
    for (std::size_t i = 0; i < scales.size(); ++i) {
      if constexpr (F::scale == kt::qscale::f32)
        scales.data()[i] = 1e-2f * static_cast<float>(1 + rng() % 8);
      else if constexpr (F::scale == kt::qscale::e8m0)
        scales.data()[i] = static_cast<std::uint8_t>(120 + rng() % 12);
      else
        scales.data()[i] = static_cast<std::uint8_t>(rng() % 127);
    }
    const kt::QPanel<F> panel{codes.data(), scales.data(), 0.37f};
    std::vector<float> x(static_cast<std::size_t>(4 * K));
    for (auto& v : x) v = nd(rng);
    for (const index_t m : {index_t{3}, index_t{4}}) {
      // (sized for the 6 rows that the slab path could be asked for)
      alignas(64) float got[kt::max_tile_rows * kt::panel_cols], want[kt::max_tile_rows * kt::panel_cols];
      kt::detail::block_times_panel(m, [&](index_t i) { return x.data() + i * K; }, K, panel, got);
      constexpr index_t kb = kt::k_block<float>;
      alignas(64) float slab[kb * kt::panel_cols];
      const float* rows[kt::max_tile_rows];
      for (index_t k0 = 0; k0 < K; k0 += kb) {
        const index_t k1 = std::min(K, k0 + kb);
        kt::expand(panel, k0, k1, slab);
        for (index_t i = 0; i < m; ++i) rows[i] = x.data() + i * K + k0;
        kt::tile_rows(static_cast<int>(m), rows, 0, k1 - k0, slab, want, k0 > 0, nullptr, 0);
      }
      EXPECT_EQ(std::memcmp(got, want, static_cast<std::size_t>(m * kt::panel_cols) * sizeof(float)), 0)
          << "K " << K << " m " << m;
    }
  }
}

TEST(Tiled, FewRowQuantizedTilesAreTheSlabPathsBits) {
  expect_register_tiles_are_the_slab_paths_bits<kt::fp8_format>();
  expect_register_tiles_are_the_slab_paths_bits<kt::mxfp4_format>();
  expect_register_tiles_are_the_slab_paths_bits<kt::nvfp4_format>();
}

TEST(Tiled, Int8ActivationQuantizationIsThePolicy) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (index_t n : {index_t{1}, index_t{15}, index_t{16}, index_t{37}, index_t{257}}) {
    std::vector<float> x(static_cast<std::size_t>(n));
    for (float& v : x) v = u(rng);
    x[0] = 3.5f;  // amax: 3.5 / (3.5/127) = 127 exactly
    if (n > 3) x[3] = 3.5f / 127.0f * 2.5f;  // a tie: rounds to even (2)
    const index_t n4 = kt::padded_k(n);
    std::vector<std::uint8_t> q(static_cast<std::size_t>(n4), 0);
    const float s = kt::quantize_row_u8(x.data(), n, n4, q.data());
    std::vector<float> want = x;
    quant::int8_w8a8::quantize_activation(want);
    for (index_t i = 0; i < n4; ++i) {
      if (i >= n) {
        EXPECT_EQ(q[static_cast<std::size_t>(i)], 128) << "padding";
        continue;
      }
      EXPECT_EQ(static_cast<float>(static_cast<int>(q[static_cast<std::size_t>(i)]) - 128) * s,
                want[static_cast<std::size_t>(i)])
          << "n " << n << " element " << i;
    }
  }
  std::vector<float> bad = {1.0f, std::numeric_limits<float>::infinity()};
  std::uint8_t q[4];
  EXPECT_TRUE(std::isnan(kt::quantize_row_u8(bad.data(), 2, 4, q))) << "a non-finite row has no scale";
  // the same where the vector loop meets the value (in either of its two running checks, or the
  // last single vector)
  for (const std::size_t at : {std::size_t{5}, std::size_t{20}, std::size_t{40}, std::size_t{50}, std::size_t{100}})
    for (const float v : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
      std::vector<float> row(112, 0.5f);
      row[at] = v;
      std::vector<std::uint8_t> codes(112, 0);
      EXPECT_TRUE(std::isnan(kt::quantize_row_u8(row.data(), 112, 112, codes.data()))) << at << " " << v;
      EXPECT_TRUE(std::all_of(codes.begin(), codes.end(), [](std::uint8_t c) { return c == 128; })) << at;
    }
}

}  // namespace
