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
  MoeLayer<a2a::local, Q, kernel::tiled> layer(cfg, w, {}, test::make_kernel<kernel::tiled>());
  const Matrix want = ref.forward_routed(hidden, r.ids, r.weights);
  const Matrix got = layer.forward_routed(hidden, r.ids, r.weights);
  EXPECT_LE(test::kernel_agreement_error<Q>(got, want), test::kernel_tolerance<Q>)
      << Q::name << " T=" << hidden.rows() << " H=" << cfg.hidden << " I=" << cfg.intermediate
      << " act=" << to_string(cfg.activation);
}

template <class Q1, class Q2>
using same_store = std::is_same<typename Q1::weights, typename Q2::weights>;

/// Every scheme the table gives kernel::tiled; the portable build takes one scheme per stored form
/// (the schemes that share a store, e.g. fp8_block and fp8_block_weight_only, run its panels and
/// differ only in their inputs) to keep its compile time, which the explicit instances do not share.
template <class F>
void for_every_scheme(F&& f) {
  using schemes = pairing::kernel_schemes<core_table, kernel::tiled>;
#if defined(POLYMOE_TILED_PORTABLE)
  using tested = boost::mp11::mp_unique_if<schemes, same_store>;
#else
  using tested = schemes;
#endif
  boost::mp11::mp_for_each<tested>([&]<class Q>(Q) { f.template operator()<Q>(); });
}

#if !POLYMOE_TILED_AVX512 && !defined(POLYMOE_TILED_PORTABLE)
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

// The top-k sum reads a token's rows of y in steps of columns, slot after slot (tuning::sum_span):
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
  for (const index_t span : {kt::tuning{}.sum_span, index_t{1}, index_t{16}, index_t{48}, index_t{1} << 30}) {
    Matrix got = Matrix::Constant(T, H, 7.0f);
    kt::sum_slots(s, y, k, got, span);
    EXPECT_TRUE((got.array() == want.array()).all()) << "span " << span;
  }
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

#if POLYMOE_TILED_AVX512
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
  const kernel::tiled k = test::make_kernel<kernel::tiled>();
  const auto prepared = k.prepare<quant::fp32>(quant::fp32::quantize(w.experts));
  Matrix want(19, cfg.hidden), got(19, cfg.hidden);
  const ExpertMlp mlp{ActivationParams{}, false};
  const DispatchOutput<format::standard> d{hidden, r.ids, r.weights, 4};
  kernels::reference_standard<quant::fp32>(d, quant::fp32::quantize(w.experts), mlp, want);
  k.run<quant::fp32>(d, prepared, mlp, CombineInput<format::standard>{got});
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
    MoeLayer<a2a::local, Q, kernel::tiled> layer(cfg, w, {}, test::make_kernel<kernel::tiled>());
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

// The tuning that kernel::tiled reads changes how a forward runs, not what it computes: y streamed
// at every size or never, other steps of the top-k sum and no huge pages give the defaults' bits.
TEST(Tiled, EveryTuningGivesTheBitsOfTheDefaults) {
  const MoeConfig cfg = test::moe_config(200, 72, 8, 2, Activation::swiglu_oai, true);
  std::mt19937 rng(31);
  const MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, 130, cfg.hidden);
  const Routing r = test::random_routing(rng, 130, 8, 2);
  for_every_scheme([&]<class Q>() {
    MoeLayer<a2a::local, Q, kernel::tiled> base(cfg, w, {}, test::make_kernel<kernel::tiled>());
    const Matrix want = base.forward_routed(hidden, r.ids, r.weights);
    for (const char* spec : {"y-stream=on", "y-stream=off", "sum-span=1", "sum-span=200", "huge-pages=off"}) {
      const kernel::tiled k{kt::parse_tuning(spec, test::tiled_tuning())};
      MoeLayer<a2a::local, Q, kernel::tiled> layer(cfg, w, {}, k);
      EXPECT_TRUE((layer.forward_routed(hidden, r.ids, r.weights).array() == want.array()).all())
          << Q::name << ", " << spec;
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
    const kernel::tiled k = test::make_kernel<kernel::tiled>();
    const auto prepared = k.prepare<Q>(Q::quantize(w.experts));
    const ExpertMlp mlp{ActivationParams{}, false};
    for (index_t T : {index_t{1}, index_t{64}}) {
      const Matrix hidden = test::random_matrix(rng, T, cfg.hidden);
      const Routing r = test::random_routing(rng, T, 8, 2);
      Matrix out(T, cfg.hidden);
      const DispatchOutput<format::standard> d{hidden, r.ids, r.weights, 8};
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
  const kt::AlignedBuffer<float> small(100);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small.data()) % kt::cache_line, 0u);
  const std::size_t n = (std::size_t{5} << 20) / sizeof(float);  // 5 MiB
  const kt::AlignedBuffer<float> large(n);
  kt::AlignedVector<float> grown;
  grown.resize(n);
  kt::Workspace ws(true);  // as a kernel with the default tuning prepares it
  ws.y.resize(n);
  const float* const buffers[] = {large.data(), grown.data(), ws.y.data()};
  for (const float* p : buffers) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % kt::detail::huge_page, 0u);
#if defined(__linux__)
    const std::string flags = vm_flags_of(p);
    ASSERT_FALSE(flags.empty()) << "no mapping in /proc/self/smaps holds the buffer";
    EXPECT_NE(flags.find(" hg "), std::string::npos) << flags;
#endif
  }
  EXPECT_TRUE(std::all_of(large.data(), large.data() + n, [](float v) { return v == 0.0f; }));
}

// tuning::huge_pages off: every buffer cache-line aligned and not advised, the workspace's too (its
// allocators carry the setting through copies and moves). Whether a mapping shows the advice cannot
// be checked here: the heap may reuse memory an earlier buffer of this program had advised.
TEST(Tiled, HugePagesOffKeepsCacheLineAlignment) {
  const std::size_t bytes = std::size_t{5} << 20;
  EXPECT_EQ(kt::detail::buffer_alignment(bytes, false), kt::cache_line);
  EXPECT_EQ(kt::detail::buffer_alignment(bytes, true), kt::detail::huge_page);
  EXPECT_EQ(kt::detail::buffer_alignment(kt::detail::huge_page - 1, true), kt::cache_line);
  const kt::AlignedBuffer<float> large(bytes / sizeof(float), false);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(large.data()) % kt::cache_line, 0u);
  EXPECT_TRUE(std::all_of(large.data(), large.data() + large.size(), [](float v) { return v == 0.0f; }));
  kt::Workspace ws(false);
  ws.act.resize(bytes / sizeof(float));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ws.act.data()) % kt::cache_line, 0u);
  const kt::Workspace copy = ws;
  kt::Workspace moved = std::move(ws);
  for (const bool huge : {copy.act.get_allocator().huge_pages, moved.act.get_allocator().huge_pages,
                          moved.y.get_allocator().huge_pages})
    EXPECT_FALSE(huge);
  // a kernel prepares its workspace as its tuning says, and computes the same bits either way
  const MoeConfig cfg = test::moe_config(96, 40, 8, 2);
  std::mt19937 rng(3);
  const MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, 33, cfg.hidden);
  const Routing r = test::random_routing(rng, 33, 8, 2);
  for_every_scheme([&]<class Q>() {
    const kernel::tiled off = test::make_kernel<kernel::tiled>([](kt::tuning& t) { t.huge_pages = false; });
    const kernel::tiled on = test::make_kernel<kernel::tiled>([](kt::tuning& t) { t.huge_pages = true; });
    EXPECT_FALSE(off.prepare<Q>(Q::quantize(w.experts)).workspace.y.get_allocator().huge_pages) << Q::name;
    MoeLayer<a2a::local, Q, kernel::tiled> a(cfg, w, {}, off), b(cfg, w, {}, on);
    const Matrix from_a = a.forward_routed(hidden, r.ids, r.weights), from_b = b.forward_routed(hidden, r.ids, r.weights);
    EXPECT_TRUE((from_a.array() == from_b.array()).all()) << Q::name;
  });
}

// The text form of the tuning (the tools' and test programs' --tuning): every key, in order, the
// defaults written and read back, and anything else refused with the reason.
TEST(Tiled, TuningTextNamesEveryKeyAndRefusesTheRest) {
  const kt::tuning defaults;
  EXPECT_EQ(kt::parse_tuning(kt::to_string(defaults)), defaults);
  EXPECT_EQ(kt::parse_tuning(""), defaults);
  const kt::tuning t = kt::parse_tuning(
      "y-stream=on,pipeline=off,gemm1_by_block=off,sum-span=16,huge-pages=0,amx-min-rows=1,bf16-block-rows=128,"
      "one-term=off,row-group=off,y-stream=auto");
  EXPECT_EQ(t.y_stream, kt::mode::automatic);  // the last setting of a key counts
  EXPECT_FALSE(t.pipeline);
  EXPECT_EQ(t.gemm1_by_block, kt::mode::off);
  EXPECT_EQ(t.sum_span, 16);
  EXPECT_FALSE(t.huge_pages);
  EXPECT_EQ(t.amx_min_rows, 1);
  EXPECT_EQ(t.bf16_block_rows, 128);
  EXPECT_FALSE(t.one_term);
  EXPECT_FALSE(t.row_group);
  EXPECT_EQ(kt::parse_tuning(kt::to_string(t)), t);
  EXPECT_EQ(t.tiles_from(8), 1);
  EXPECT_EQ(defaults.tiles_from(8), 8);
  EXPECT_EQ(kt::parse_tuning("sum-span=128", t).sum_span, 128);  // on top of a base
  EXPECT_FALSE(kt::parse_tuning("sum-span=128", t).pipeline);
  const auto refused = [](const char* spec, const char* says) {
    try {
      (void)kt::parse_tuning(spec);
      ADD_FAILURE() << spec << " was taken";
    } catch (const polymoe::error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << spec << ": " << e.what();
    }
  };
  refused("warp=9", "unknown key 'warp'");
  refused("y-stream=maybe", "y-stream takes auto, on or off");
  refused("pipeline=auto", "pipeline takes on or off");
  refused("sum-span=12x", "sum-span takes a whole number");
  refused("sum-span=", "sum-span takes a whole number");
  refused("sum-span=0", "sum-span must be in [1, 2^30]");
  refused("amx-min-rows=-1", "amx-min-rows must be in [0, 2^30]");
  refused("bf16-block-rows=100", "bf16-block-rows must be a multiple of 16");
  refused("bf16-block-rows=512", "bf16-block-rows must be a multiple of 16");
  refused("sum-span", "expected key=value");
  refused("=3", "expected key=value");
  // a kernel refuses a tuning out of range when it prepares
  kernel::tiled k;
  k.tuning.sum_span = 0;
  std::mt19937 rng(1);
  const MoeWeights w = test::random_weights(rng, test::moe_config(16, 8, 2, 1));
  EXPECT_THROW((void)k.prepare<quant::fp32>(quant::fp32::quantize(w.experts)), polymoe::error);
}

TEST(Tiled, PhaseTimesCoverTheForward) {
  const MoeConfig cfg = test::moe_config(96, 40, 8, 2);
  std::mt19937 rng(5);
  const MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, 64, cfg.hidden);
  const Routing r = test::random_routing(rng, 64, 8, 2);
  const auto check = [&]<class Q>() {
    kt::PhaseTimes t;
    kernel::tiled timed = test::make_kernel<kernel::tiled>();
    timed.phases = &t;
    const auto prepared = timed.prepare<Q>(Q::quantize(w.experts));
    const ExpertMlp mlp{ActivationParams{}, false};
    Matrix out(64, cfg.hidden);
    const DispatchOutput<format::standard> d{hidden, r.ids, r.weights, 8};
    const auto t0 = std::chrono::steady_clock::now();
    timed.run<Q>(d, prepared, mlp, CombineInput<format::standard>{out});
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
    test::make_kernel<kernel::tiled>().run<Q>(d, prepared, mlp, CombineInput<format::standard>{out});  // no sink
    EXPECT_EQ(t.forwards, 1) << Q::name;
  };
  // one scheme per stored form: the float, int8, int4 and decoded paths all charge their phases
  using one_per_store = boost::mp11::mp_unique_if<pairing::kernel_schemes<core_table, kernel::tiled>, same_store>;
  boost::mp11::mp_for_each<one_per_store>([&]<class Q>(Q) { check.template operator()<Q>(); });
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
    const float s = polymoe::quantize::int8_scale(amax);
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
      ASSERT_EQ(static_cast<int>(q[static_cast<std::size_t>(i)]) - 128, polymoe::quantize::round_to_int8(x[i] / s))
          << "amax " << amax << " x " << x[i];
  }
}

TEST(Tiled, QuotientByReciprocalIsTheDivision) {
#if POLYMOE_TILED_AVX512
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

/// A panel of format F over K k-rows with random codes (no E4M3 NaN codes) and random scales in a
/// range that keeps the products finite: fp32 0.01-0.08, E8M0 2^-7-2^4, E4M3 codes below 127.
template <class F>
struct random_qpanel {
  std::vector<std::uint8_t> codes;
  kt::AlignedBuffer<typename F::scale_type> scales;
  kt::QPanel<F> panel;
  random_qpanel(index_t K, std::mt19937& rng)
      : codes(static_cast<std::size_t>(K * F::row_bytes)),
        scales(static_cast<std::size_t>(F::groups(K) * kt::panel_cols)),
        panel{codes.data(), scales.data(), 0.37f} {
    for (auto& b : codes) {
      b = static_cast<std::uint8_t>(rng());
      if (F::code == kt::qcode::e4m3 && (b & 0x7F) == 0x7F) b = 0x38;
    }
    for (std::size_t i = 0; i < scales.size(); ++i) {
      if constexpr (F::scale == kt::qscale::f32)
        scales.data()[i] = 1e-2f * static_cast<float>(1 + rng() % 8);
      else if constexpr (F::scale == kt::qscale::e8m0)
        scales.data()[i] = static_cast<std::uint8_t>(120 + rng() % 12);
      else
        scales.data()[i] = static_cast<std::uint8_t>(rng() % 127);
    }
  }
};

/// Blocks of 3 and 4 rows on a quantized panel of format F (block_times_panel: qtile, the weights
/// widened in registers), and of 1 and 2 rows without the short loops (a batch-invariant run), give
/// the bits of the slab path (expand a slab into L1, tile<M> over it), over K = 300 and 1000
/// (partial scale groups and slabs), random codes and scales.
template <class F>
void expect_register_tiles_are_the_slab_paths_bits() {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  for (const index_t K : {index_t{300}, index_t{1000}}) {
    const random_qpanel<F> rp(K, rng);
    const kt::QPanel<F>& panel = rp.panel;
    std::vector<float> x(static_cast<std::size_t>(4 * K));
    for (auto& v : x) v = nd(rng);
    for (const index_t m : {index_t{1}, index_t{2}, index_t{3}, index_t{4}}) {
      // (sized for the 6 rows that the slab path could be asked for)
      alignas(64) float got[kt::max_tile_rows * kt::panel_cols], want[kt::max_tile_rows * kt::panel_cols];
      kt::detail::block_times_panel(m, [&](index_t i) { return x.data() + i * K; }, K, panel, got,
                                    /*short_loops=*/false);
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

#if POLYMOE_TILED_AVX512
// The decode of E4M3 panels (decode_qtile, one and two rows) against its model in scalar code: per
// scale group, products summed into two fp32 accumulators (even and odd k, one fused rounding
// each), their sum times the group's scale fused into the row's sum: the same bits. K = 300 and
// 1000: partial scale groups.
TEST(Tiled, E4m3DecodeIsTheGroupedFmaModel) {
  using F = kt::fp8_format;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (const index_t K : {index_t{300}, index_t{1000}}) {
    const random_qpanel<F> rp(K, rng);
    std::vector<float> x(static_cast<std::size_t>(2 * K));
    for (auto& v : x) v = nd(rng);
    for (const int m : {1, 2}) {
      alignas(64) float got[2 * kt::panel_cols];
      const float* rows[2] = {x.data(), x.data() + K};
      if (m == 1) kt::decode_qtile<1>(rows, K, rp.panel, got);
      else kt::decode_qtile<2>(rows, K, rp.panel, got);
      for (int r = 0; r < m; ++r)
        for (index_t c = 0; c < kt::panel_cols; ++c) {
          const auto w = [&](index_t k) {
            return codecs::e4m3_to_float(rp.codes[static_cast<std::size_t>(k * F::row_bytes + c)]);
          };
          const float* a = rows[r];
          float acc = 0.0f;
          for (index_t g0 = 0; g0 < K; g0 += F::group) {
            const index_t g1 = std::min(K, g0 + F::group);
            float even = 0.0f, odd = 0.0f;
            index_t k = g0;
            for (; k + 1 < g1; k += 2) {
              even = std::fma(a[k], w(k), even);
              odd = std::fma(a[k + 1], w(k + 1), odd);
            }
            if (k < g1) even = std::fma(a[k], w(k), even);
            acc = std::fma(even + odd, rp.scales.data()[(g0 / F::group) * kt::panel_cols + c], acc);
          }
          ASSERT_EQ(std::bit_cast<std::uint32_t>(got[r * kt::panel_cols + c]), std::bit_cast<std::uint32_t>(acc))
              << "K " << K << " rows " << m << " row " << r << " column " << c;
        }
    }
  }
}
#endif

TEST(Tiled, FewRowQuantizedTilesAreTheSlabPathsBits) {
  expect_register_tiles_are_the_slab_paths_bits<kt::fp8_format>();
  expect_register_tiles_are_the_slab_paths_bits<kt::mxfp4_format>();
  expect_register_tiles_are_the_slab_paths_bits<kt::nvfp4_format>();
}

#if POLYMOE_TILED_DPBF16
/// Rows of bf16 values (W4A16: block_times_panel<true>) or of fp32 values (W4A32, as two bf16
/// terms) against an E2M1 panel of format F on the decode loop (decode_qtile_bf16 on this target)
/// give the double sum of the rows times the codec's weights (e2m1 · scale, NVFP4 also · global)
/// within the rounding of K fp32 additions, and for fp32 rows 2^-17 of each product (hi + lo);
/// K odd and with a partial last group, and random codes and scales; an infinite input gives the
/// infinities (and NaN on zero weights) the products do.
template <class F, bool Bf16Rows>
void expect_bf16_pair_decode_agrees() {
  std::mt19937 rng(12);
  std::normal_distribution<float> nd;
  for (const index_t K : {index_t{301}, index_t{1024}}) {
    const random_qpanel<F> rp(K, rng);
    const kt::QPanel<F>& panel = rp.panel;
    const std::vector<std::uint8_t>& codes = rp.codes;
    const auto& scales = rp.scales;
    const auto weight = [&](index_t k, index_t c) {
      const auto [byte, shift] = kt::code_position<F>(c);
      const auto q = static_cast<std::uint8_t>((codes[static_cast<std::size_t>(k * F::row_bytes + byte)] >> shift) & 15);
      const std::uint8_t s = scales.data()[(k / F::group) * kt::panel_cols + c];
      if constexpr (F::scale == kt::qscale::e8m0)
        return static_cast<double>(codecs::e2m1_to_float(q)) * codecs::e8m0_to_float(s);
      else
        return static_cast<double>(codecs::e2m1_to_float(q)) * codecs::e4m3_to_float(s) * panel.global;
    };
    std::vector<float> x(static_cast<std::size_t>(2 * K));
    for (auto& v : x) v = Bf16Rows ? codecs::bf16_to_float(codecs::float_to_bf16(nd(rng))) : nd(rng);
    for (const index_t m : {index_t{1}, index_t{2}}) {
      alignas(64) float got[kt::max_tile_rows * kt::panel_cols];
      kt::detail::block_times_panel<Bf16Rows>(m, [&](index_t i) { return x.data() + i * K; }, K, panel, got,
                                              /*short_loops=*/true);
      int wrong = 0;
      for (index_t r = 0; r < m; ++r)
        for (index_t c = 0; c < kt::panel_cols; ++c) {
          double want = 0.0, size = 0.0;
          for (index_t k = 0; k < K; ++k) {
            const double t = static_cast<double>(x[static_cast<std::size_t>(r * K + k)]) * weight(k, c);
            want += t;
            size += std::abs(t);
          }
          const double bound = (static_cast<double>(K + 2) * 0x1p-24 + (Bf16Rows ? 0.0 : 0x1p-17)) * size + 1e-30;
          if (std::abs(got[r * kt::panel_cols + c] - want) > bound && ++wrong <= 5)
            ADD_FAILURE() << "K " << K << " m " << m << " row " << r << " column " << c << ": "
                          << got[r * kt::panel_cols + c] << " against " << want << " (bound " << bound << ")";
        }
      EXPECT_EQ(wrong, 0) << "K " << K << " m " << m;
    }
    // An infinite input: each column is that infinity times the sign of its weight there, NaN where
    // the weight is zero (inf · 0), whatever the row's finite values add.
    x[7] = -std::numeric_limits<float>::infinity();
    alignas(64) float got[kt::max_tile_rows * kt::panel_cols];
    kt::detail::block_times_panel<Bf16Rows>(1, [&](index_t) { return x.data(); }, K, panel, got, /*short_loops=*/true);
    for (index_t c = 0; c < kt::panel_cols; ++c) {
      const double w = weight(7, c);
      if (w == 0.0)
        EXPECT_TRUE(std::isnan(got[c])) << "K " << K << " column " << c << ": " << got[c];
      else
        EXPECT_EQ(got[c], w > 0.0 ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity())
            << "K " << K << " column " << c;
    }
  }
}

TEST(Tiled, Bf16PairDecodeOfE2m1PanelsIsTheDoubleSum) {
  expect_bf16_pair_decode_agrees<kt::mxfp4_format, true>();
  expect_bf16_pair_decode_agrees<kt::nvfp4_format, true>();
}

TEST(Tiled, Bf16TermsDecodeOfE2m1PanelsOnFp32RowsIsTheDoubleSum) {
  expect_bf16_pair_decode_agrees<kt::mxfp4_format, false>();
  expect_bf16_pair_decode_agrees<kt::nvfp4_format, false>();
}
#endif

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
