// The CUDA engine (polymoe::cuda) against the CPU: routing against core/routing.hpp (ids equal,
// weights to 1e-6) and the experts against the reference kernel with quant::bf16 and the W4A16
// schemes (4-bit weights), element by element within a bound derived from the arithmetic (below); run-to-run and graph-replay bitwise
// equality; bad input. Each test is skipped, with the reason, where no usable GPU is present.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test.hpp"

#include <cuda_runtime_api.h>

#include <polymoe/codecs/bf16.hpp>
#include <polymoe/codecs/e4m3.hpp>
#include <polymoe/core/routing.hpp>
#include <polymoe/cuda/experts.hpp>
#include <polymoe/cuda_table.hpp>
#include <polymoe/kernels/reference_experts.hpp>
#include <polymoe/quant/bf16.hpp>
#include <polymoe/quant/fp8.hpp>
#include <polymoe/quant/fp8_block.hpp>
#include <polymoe/quant/mxfp4.hpp>
#include <polymoe/quantize/fp8.hpp>
#include <polymoe/quant/nvfp4.hpp>

namespace {

using namespace polymoe;


Matrix randn(index_t r, index_t c, float scale, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, scale);
  Matrix m(r, c);
  for (index_t i = 0; i < m.size(); ++i) m.data()[i] = d(rng);
  return m;
}

// ---------------------------------------------------------------------------------------------
// Routing

struct RouteCase {
  const char* name;
  RoutingMethod method;
  index_t E, k;
  bool renormalize;
  index_t n_group = 1, topk_group = 1;
  float scale = 1.0f;
  bool bias = false;
  bool ties = false;  // logits from a few values: ties everywhere, decided by the lower index
};

void check_routing(const RouteCase& c, index_t T, std::uint32_t seed) {
  std::mt19937 rng(seed);
  RouterConfig rc;
  rc.method = c.method;
  rc.top_k = c.k;
  rc.renormalize = c.renormalize;
  rc.n_group = c.n_group;
  rc.topk_group = c.topk_group;
  rc.routed_scaling_factor = c.scale;
  if (c.bias) rc.correction_bias = randn(c.E, 1, 0.5f, rng);
  Matrix z = randn(T, c.E, 2.0f, rng);
  if (c.ties)
    for (index_t i = 0; i < z.size(); ++i) z.data()[i] = std::round(z.data()[i]);
  const Routing cpu = route(rc, c.E, z);
  const cuda::Router router(rc, c.E);
  const Routing gpu = router.route(z);
  for (index_t t = 0; t < T; ++t)
    for (index_t j = 0; j < c.k; ++j) {
      ASSERT_EQ(gpu.ids(t, j), cpu.ids(t, j)) << c.name << " T=" << T << " token " << t << " slot " << j;
      ASSERT_NEAR(gpu.weights(t, j), cpu.weights(t, j), 1e-6f * std::max(1.0f, c.scale))
          << c.name << " T=" << T << " token " << t << " slot " << j;
    }
}

TEST(CudaRouting, MatchesCpu) {
  REQUIRE_GPU();
  const RouteCase cases[] = {
      {"softmax_renorm_E8_k2", RoutingMethod::softmax_topk, 8, 2, true},
      {"softmax_E64_k8", RoutingMethod::softmax_topk, 64, 8, false},
      {"softmax_renorm_E128_k8", RoutingMethod::softmax_topk, 128, 8, true},
      {"softmax_E8_k1", RoutingMethod::softmax_topk, 8, 1, false},
      {"softmax_ties_E64_k8", RoutingMethod::softmax_topk, 64, 8, true, 1, 1, 1.0f, false, true},
      {"topk_softmax_E32_k4", RoutingMethod::topk_softmax, 32, 4, false},
      {"topk_softmax_E128_k8", RoutingMethod::topk_softmax, 128, 8, false},
      {"topk_softmax_ties_E64_k2", RoutingMethod::topk_softmax, 64, 2, false, 1, 1, 1.0f, false, true},
      {"sigmoid_grouped_E256_k8", RoutingMethod::sigmoid_grouped_topk, 256, 8, true, 8, 4, 2.5f, true},
      {"sigmoid_grouped_nobias_E64_k6", RoutingMethod::sigmoid_grouped_topk, 64, 6, true, 8, 3, 1.0f, false},
      {"sigmoid_grouped_norenorm_E16_k2", RoutingMethod::sigmoid_grouped_topk, 16, 2, false, 4, 2, 1.5f, true},
      {"sigmoid_grouped_ties_E64_k8", RoutingMethod::sigmoid_grouped_topk, 64, 8, true, 4, 2, 1.0f, true, true},
  };
  std::uint32_t seed = 1;
  for (const RouteCase& c : cases)
    for (index_t T : {1, 7, 300}) check_routing(c, T, seed++);
}

// ---------------------------------------------------------------------------------------------
// Experts against the reference, within a derived bound.
//
// Both sides round the same input rows to bf16 and multiply the same bf16 weights; they differ in
//  (1) the order and precision of the sums inside the GEMMs: the reference sums exact products in
//      double, the GPU in fp32 on the tensor cores. With products exact and every addition
//      rounded (toward zero, at worst), |error| <= 2·n·2^-24·Σ|products| for n terms (gamma);
//  (2) the activation evaluated from slightly different pre-activations (and expf against
//      std::exp, a few ulp): bounded by evaluating it at the corners of the error box, twice that,
//      plus 8 fp32 ulp;
//  (3) the bf16 rounding of the intermediate, which may go the other way when the two values lie
//      on either side of a rounding boundary: |bf16(a) - bf16(b)| <= |a - b| + ulp_bf16.
// The bound of an output element sums these through GEMM 2, the weight and the top-k sum.
// 4-bit weights decode to the same values on both sides (exact in bf16), except NVFP4's scale_2:
// the reference multiplies each weight by it (one rounding a weight), the GPU multiplies the sums
// (one rounding a sum); one more term in each gamma covers both.
//
// The fp8 schemes (E4M3 activations and weights) differ in kind:
//  (4) the input rows' codes and scales are the CPU's bit for bit (CudaQuantizeE4m3 checks it);
//  (5) the GPU sums the exact products of each 128 k on the fp8 tensor cores, whose accumulator
//      keeps 13 fraction bits (truncated at each k32 step; DeepSeek-V3's report and public models
//      of Hopper's tensor cores), then adds them times the two scales in fp32; the reference
//      multiplies dequantized fp32 values. Bound: 4 steps a 128 k, each off by at most 2^-12 of
//      the magnitudes summed, plus gamma with 4 more terms (the reference's two dequantizing
//      roundings, the scales' product and the fold);
//  (6) the intermediate is quantized from fp32 values that differ by (1)-(2): its scale and each
//      code may land elsewhere; the bound takes the extreme codes and scales over the error box.
double gamma_n(index_t n) { return 2.0 * static_cast<double>(n) * std::ldexp(1.0, -24); }
template <class Q>
constexpr bool e4m3_scheme = std::is_same_v<Q, quant::fp8_block> || std::is_same_v<Q, quant::fp8>;
template <class Q>
double gemm_gamma(index_t n) {
  if constexpr (e4m3_scheme<Q>) return gamma_n(n + 4) + 4.0 * std::ldexp(1.0, -12);
  return gamma_n(n + (std::is_same_v<typename Q::weights, quant::nvfp4::weights> ? 1 : 0));
}

// (6): for the values f (fp32, each within df of the GPU's) in groups of `group`, the CPU's
// quantized values h and a bound dh on |GPU's - h| for each.
void e4m3_box(const std::vector<float>& f, const std::vector<double>& df, index_t group, std::vector<double>& h,
              std::vector<double>& dh) {
  namespace kq = polymoe::quantize;
  const index_t n = static_cast<index_t>(f.size());
  for (index_t g0 = 0; g0 < n; g0 += group) {
    const index_t g1 = std::min(n, g0 + group);
    double amax = 0.0, d = 0.0;
    for (index_t q = g0; q < g1; ++q) amax = std::max(amax, std::fabs(double(f[q]))), d = std::max(d, df[q]);
    const float s = kq::e4m3_scale(static_cast<float>(amax));
    const float s_lo = kq::e4m3_scale(static_cast<float>(std::max(0.0, amax - d)));
    const float s_hi = kq::e4m3_scale(std::nextafter(static_cast<float>(amax + d), INFINITY));
    for (index_t q = g0; q < g1; ++q) {
      const float c = codecs::e4m3_to_float(codecs::float_to_e4m3_sat(f[q] / s));
      h[q] = static_cast<double>(c * s);
      double worst = 0.0;
      const float x_lo = static_cast<float>(f[q] - df[q]), x_hi = static_cast<float>(f[q] + df[q]);
      float r_lo = INFINITY, r_hi = -INFINITY;
      for (float x : {x_lo, x_hi})
        for (float sc : {s_lo, s_hi}) r_lo = std::min(r_lo, x / sc), r_hi = std::max(r_hi, x / sc);
      for (float r : {r_lo, r_hi})
        for (float sc : {s_lo, s_hi})
          worst = std::max(worst, std::fabs(double(codecs::e4m3_to_float(codecs::float_to_e4m3_sat(r))) * sc - h[q]));
      dh[q] = worst + std::ldexp(std::fabs(h[q]) + worst, -23);  // the GPU's fp32 product rounded
    }
  }
}

double ulp_bf16(double v) {
  v = std::fabs(v);
  if (v == 0.0) return 0.0;
  int e = 0;
  std::frexp(v, &e);  // v = m·2^e, m in [0.5, 1)
  return std::ldexp(1.0, e - 1 - 7);
}

struct Case {
  index_t E, H, I, k, T;
  Activation act = Activation::silu_gated;
  bool bias = false;
  bool weight_on_input = false;
  int ids_pattern = 0;  // 0 random distinct, 1 every token's slot 0 on expert 1, 2 some slots -1
  cuda::TileChoice tiles = cuda::TileChoice::automatic;
  float w2_scale = 1.0f;  // w2's magnitude: 4-bit block scale codes far from 1 (E8M0 above 2^1 too)
};

std::string describe(const Case& c) {
  return detail::concat("E=", c.E, " H=", c.H, " I=", c.I, " k=", c.k, " T=", c.T, " act=", to_string(c.act),
                        " bias=", c.bias, " woi=", c.weight_on_input, " ids=", c.ids_pattern, " tiles=",
                        static_cast<int>(c.tiles), " w2_scale=", c.w2_scale);
}

template <class Q = quant::bf16>
struct Problem {
  typename Q::weights w;
  ExpertMlp mlp;
  Matrix hidden, weights;
  IdMatrix ids;
};

template <class Q = quant::bf16>
Problem<Q> make_problem(const Case& c, std::uint32_t seed) {
  std::mt19937 rng(seed);
  ExpertShape s{c.E, c.H, c.I, is_gated(c.act), c.bias};
  ExpertWeights f(s);
  f.w13 = randn(f.w13.rows(), f.w13.cols(), 1.0f / std::sqrt(static_cast<float>(c.H)), rng);
  f.w2 = randn(f.w2.rows(), f.w2.cols(), c.w2_scale / std::sqrt(static_cast<float>(c.I)), rng);
  if (c.bias) {
    f.b13 = randn(c.E, s.rows13(), 0.3f, rng);
    f.b2 = randn(c.E, c.H, 0.3f * c.w2_scale, rng);
  }
  Problem<Q> p{Q::quantize(f), {}, randn(c.T, c.H, 1.0f, rng), Matrix(c.T, c.k), IdMatrix(c.T, c.k)};
  p.mlp.activation.kind = c.act;
  p.mlp.weight_on_input = c.weight_on_input;
  std::uniform_real_distribution<float> uw(0.05f, 1.0f);
  std::vector<std::int32_t> perm(static_cast<std::size_t>(c.E));
  for (index_t t = 0; t < c.T; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    if (c.ids_pattern == 1) std::iter_swap(perm.begin(), std::find(perm.begin(), perm.end(), 1));
    for (index_t j = 0; j < c.k; ++j) {
      p.ids(t, j) = perm[static_cast<std::size_t>(j)];
      p.weights(t, j) = uw(rng);
      if (c.ids_pattern == 2 && (t + j) % 3 == 1) p.ids(t, j) = -1;
    }
  }
  return p;
}

// The bound of (1)-(3) for every output element.
template <class Q>
Matrix error_bound(const Case& c, const Problem<Q>& p) {
  const index_t H = c.H, I = c.I, R = is_gated(c.act) ? 2 * I : I;
  Matrix bound = Matrix::Zero(c.T, H);
  kernels::DenseExpert dense;
  std::vector<float> x(static_cast<std::size_t>(H)), pre(static_cast<std::size_t>(R)), eps(static_cast<std::size_t>(R));
  std::vector<double> h(static_cast<std::size_t>(I)), dh(static_cast<std::size_t>(I)), df(static_cast<std::size_t>(I));
  std::vector<float> f(static_cast<std::size_t>(I));
  ActivationParams ap;
  ap.kind = c.act;
  auto f_at = [&](index_t j, float g, float u) {
    float in[2] = {g, u}, out = 0.0f;
    if (is_gated(c.act)) {
      apply_activation(ap, in, &out, 1);
    } else {
      apply_activation(ap, in, &out, 1);
    }
    return out;
    (void)j;
  };
  for (index_t t = 0; t < c.T; ++t) {
    double slot_abs = 0.0;
    std::vector<double> acc(static_cast<std::size_t>(H), 0.0), mag(static_cast<std::size_t>(H), 0.0);
    for (index_t j = 0; j < c.k; ++j) {
      const index_t e = p.ids(t, j);
      if (e < 0) continue;
      kernels::load_dense_expert<Q>(p.w, e, dense);
      const float wt = p.weights(t, j);
      for (index_t q = 0; q < H; ++q) x[q] = c.weight_on_input ? p.hidden(t, q) * wt : p.hidden(t, q);
      Q::quantize_activation(x);
      for (index_t r = 0; r < R; ++r) {
        double s = 0.0, a = 0.0;
        for (index_t q = 0; q < H; ++q) {
          const double v = static_cast<double>(dense.w13(r, q)) * x[q];
          s += v;
          a += std::fabs(v);
        }
        pre[r] = static_cast<float>(s) + (dense.b13 ? dense.b13[r] : 0.0f);
        eps[r] = static_cast<float>(gemm_gamma<Q>(H) * a + 2.0 * std::ldexp(std::fabs(pre[r]), -24));
      }
      for (index_t q = 0; q < I; ++q) {
        const float g = pre[q], u = is_gated(c.act) ? pre[I + q] : 0.0f;
        const float eg = eps[q], eu = is_gated(c.act) ? eps[I + q] : 0.0f;
        const float f0 = f_at(q, g, u);
        double dev = 0.0;
        for (float sg : {-1.0f, 0.0f, 1.0f})
          for (float su : {-1.0f, 0.0f, 1.0f}) dev = std::max(dev, std::fabs(double(f_at(q, g + sg * eg, u + su * eu)) - f0));
        f[q] = f0;
        df[q] = 2.0 * dev + 8.0 * std::ldexp(std::fabs(f0), -24);
        h[q] = codecs::bf16_to_float(codecs::float_to_bf16(f0));
        dh[q] = df[q] + ulp_bf16(std::fabs(f0) + df[q]);
      }
      if constexpr (e4m3_scheme<Q>) e4m3_box(f, df, std::is_same_v<Q, quant::fp8> ? I : 128, h, dh);
      const double w_out = c.weight_on_input ? 1.0 : std::fabs(wt);
      for (index_t r = 0; r < H; ++r) {
        double e1 = 0.0, a = 0.0, y = 0.0;
        for (index_t q = 0; q < I; ++q) {
          const double wv = std::fabs(static_cast<double>(dense.w2(r, q)));
          e1 += wv * dh[q];
          a += wv * (std::fabs(h[q]) + dh[q]);
          y += static_cast<double>(dense.w2(r, q)) * h[q];
        }
        y += dense.b2 ? dense.b2[r] : 0.0f;
        const double err = (e1 + gemm_gamma<Q>(I) * a + 2.0 * std::ldexp(std::fabs(y), -24)) * w_out +
                           2.0 * std::ldexp(std::fabs(y) * w_out, -24);
        acc[r] += err;
        mag[r] += std::fabs(y) * w_out + err;
      }
      slot_abs += 1.0;
    }
    for (index_t r = 0; r < H; ++r) bound(t, r) = static_cast<float>(acc[r] + gamma_n(c.k) * mag[r]);
    (void)slot_abs;
  }
  return bound;
}

// Against the reference with each GEMM tile shape (c.tiles automatic) or with c.tiles alone.
template <class Q = quant::bf16>
void check_against_reference(Case c, std::uint32_t seed) {
  SCOPED_TRACE(std::string(Q::name));
  Problem<Q> p = make_problem<Q>(c, seed);
  Matrix ref(c.T, c.H);
  const DispatchOutput<format::standard> d{p.hidden, p.ids, p.weights, c.E};
  kernels::reference_standard<Q>(d, p.w, p.mlp, ref);
  const Matrix bound = error_bound(c, p);

  cuda::Experts experts(p.w, p.mlp);
  std::vector<cuda::TileChoice> choices{c.tiles};
  if (c.tiles == cuda::TileChoice::automatic)
    choices = {cuda::TileChoice::automatic, cuda::TileChoice::tiny, cuda::TileChoice::small, cuda::TileChoice::large,
               cuda::TileChoice::wide, cuda::TileChoice::deep};
  for (cuda::TileChoice t : choices) {
    c.tiles = t;
    SCOPED_TRACE(describe(c));
    experts.set_tiles(t);
    Matrix out = Matrix::Constant(c.T, c.H, std::nanf(""));
    experts.forward_routed(p.hidden, p.ids, p.weights, out);
    double worst = 0.0, err2 = 0.0, ref2 = 0.0;
    index_t bad = 0;
    for (index_t tk = 0; tk < c.T; ++tk)
      for (index_t r = 0; r < c.H; ++r) {
        const double e = std::fabs(double(out(tk, r)) - ref(tk, r));
        err2 += e * e;
        ref2 += double(ref(tk, r)) * ref(tk, r);
        if (!(e <= bound(tk, r))) {
          if (bad++ < 5)
            ADD_FAILURE() << "out[" << tk << ", " << r << "] = " << out(tk, r) << ", reference " << ref(tk, r)
                          << ", |diff| " << e << " > bound " << bound(tk, r);
        } else if (bound(tk, r) > 0) {
          worst = std::max(worst, e / bound(tk, r));
        }
      }
    EXPECT_EQ(bad, 0) << "elements outside the bound";
    std::printf("  %s %s: rel. error %.3g, worst |diff|/bound %.3f\n", Q::name.data(), describe(c).c_str(),
                std::sqrt(err2 / std::max(ref2, 1e-300)), worst);
  }
}

TEST(CudaExperts, MatchesReferenceGated) {
  REQUIRE_GPU();
  std::uint32_t seed = 100;
  const Case cases[] = {
      {8, 128, 128, 2, 7},
      {8, 200, 72, 2, 1},
      {8, 200, 72, 2, 64},
      {64, 96, 136, 8, 300},
      {64, 256, 192, 8, 7},
      {8, 136, 200, 1, 300},
      {8, 136, 200, 8, 64},
      {8, 72, 40, 2, 300, Activation::gelu_gated},
      {64, 160, 96, 8, 64, Activation::gelu_gated},
      {8, 72, 40, 4, 300, Activation::swiglu_oai, true},
      {64, 200, 88, 8, 64, Activation::swiglu_oai, true},
      {8, 128, 64, 2, 64, Activation::silu_gated, true},
      {16, 1024, 384, 4, 64},  // long K loops in both GEMMs
  };
  for (const Case& c : cases) check_against_reference(c, seed++);
}

TEST(CudaExperts, MatchesReferenceNonGated) {
  REQUIRE_GPU();
  std::uint32_t seed = 200;
  const Case cases[] = {
      {8, 200, 72, 2, 64, Activation::silu},
      {64, 96, 136, 8, 300, Activation::relu2},
      {8, 72, 200, 1, 7, Activation::relu2, true},
  };
  for (const Case& c : cases) check_against_reference(c, seed++);
}

TEST(CudaExperts, MatchesReferenceRoutingPatterns) {
  REQUIRE_GPU();
  std::uint32_t seed = 300;
  Case c{8, 200, 72, 2, 300};
  c.ids_pattern = 1;  // every token's slot 0 on one expert
  check_against_reference(c, seed++);
  c = Case{64, 96, 136, 8, 64};
  c.ids_pattern = 2;  // slots computed elsewhere (-1)
  check_against_reference(c, seed++);
  c = Case{8, 128, 128, 1, 64, Activation::silu_gated, false, true};  // weight on the input
  check_against_reference(c, seed++);
  c = Case{64, 128, 96, 8, 1};  // T = 1: most experts without a row
  check_against_reference(c, seed++);
  // at most 32 pairs (the one-warp sort): experts shared by several tokens, an expert of two row
  // tiles, slots not computed
  c = Case{8, 200, 72, 2, 7};
  c.ids_pattern = 1;
  check_against_reference(c, seed++);
  c = Case{8, 128, 128, 1, 20};
  c.ids_pattern = 1;
  check_against_reference(c, seed++);
  c = Case{64, 96, 136, 8, 4};
  c.ids_pattern = 2;
  check_against_reference(c, seed++);
}

// The shapes every quantized scheme runs (each tile shape as well): K not a multiple of the blocks
// (the padded codes; for fp8_block, partial blocks and groups of 128), odd N, biases and the clamp
// (GPT-OSS), long K loops, T = 1.
const Case quantized_cases[] = {
    {8, 128, 128, 2, 7},
    {8, 200, 72, 2, 64},          // H: 6 blocks of 32 and a partial one; I: 2 and a partial
    {64, 96, 136, 8, 300},
    {8, 136, 200, 8, 64},         // NVFP4: H = 8.5 blocks of 16
    {8, 72, 40, 4, 300, Activation::swiglu_oai, true},
    {64, 200, 88, 8, 64, Activation::swiglu_oai, true},
    {8, 72, 200, 1, 7, Activation::relu2, true},
    {16, 1024, 384, 4, 64},       // long K loops in both GEMMs (fp8_block: 8 and 3 blocks of 128)
    {64, 128, 96, 8, 1},          // T = 1
};

// 4-bit weights (kept 4-bit on the device): the quantized cases, and block scales far from 1 both
// ways.
template <class Q>
void check_4bit(std::uint32_t seed) {
  for (const Case& c : quantized_cases) check_against_reference<Q>(c, seed++);
  Case big{8, 136, 72, 2, 64};
  big.w2_scale = 0x1p40f;  // E8M0 codes near 167: scales above 2^1
  check_against_reference<Q>(big, seed++);
  Case small{8, 136, 72, 2, 64};
  small.w2_scale = 0x1p-40f;
  check_against_reference<Q>(small, seed++);
  Case routes{64, 96, 136, 8, 64};
  routes.ids_pattern = 2;
  check_against_reference<Q>(routes, seed++);
}

TEST(CudaExperts, MatchesReferenceMxfp4W4A16) {
  REQUIRE_GPU();
  check_4bit<quant::mxfp4_w4a16>(400);
}

TEST(CudaExperts, MatchesReferenceNvfp4W4A16) {
  REQUIRE_GPU();
  check_4bit<quant::nvfp4_w4a16>(500);
}

template <class F>
void expect_error(F&& f, const std::string& part);

// The fp8 schemes (E4M3 weights and activations on the fp8 tensor cores): the quantized cases,
// the weight on the input (quantized after the weight, as the reference does), a large w2 and
// slots computed elsewhere.
template <class Q>
void check_e4m3(std::uint32_t seed) {
  for (const Case& c : quantized_cases) check_against_reference<Q>(c, seed++);
  check_against_reference<Q>(Case{8, 128, 128, 1, 64, Activation::silu_gated, false, true}, seed++);
  Case big{8, 136, 72, 2, 64};
  big.w2_scale = 0x1p40f;
  check_against_reference<Q>(big, seed++);
  Case routes{64, 96, 136, 8, 64};
  routes.ids_pattern = 2;
  check_against_reference<Q>(routes, seed++);
}

TEST(CudaExperts, MatchesReferenceFp8Block) {
  REQUIRE_GPU();
  check_e4m3<quant::fp8_block>(600);
}

TEST(CudaExperts, MatchesReferenceFp8) {
  REQUIRE_GPU();
  check_e4m3<quant::fp8>(700);
}

// A decode batch (up to 32 pairs) is sorted by one warp in registers, and for E4M3 on the small
// tiles GEMM 2 quantizes its own input rows; a batch of 64 tokens (512 pairs) takes the block's
// counting sort (and quantize_tiles). A row's result does not depend on the rows batched with it
// on one tile shape, so the first tokens of a batch of 64 give the bits of those tokens alone.
// Every token's slot 0 goes to expert 1, whose row tile then holds 1-4 rows (rows sharing a
// block's warps, and a warp a row); the others hold one. I = 200: a row of 2 groups of 128, the
// second part padding; I = 768: 6 groups; a row with an infinity (its codes 0, its scale NaN) and
// one of zeros.
template <class Q>
void check_decode_rows(std::uint32_t seed, cuda::TileChoice tiles, std::initializer_list<index_t> inters) {
  for (const index_t I : inters) {
    Case c{16, 256, I, 8, 64};
    c.ids_pattern = 1;
    SCOPED_TRACE(describe(c) + " tiles " + std::to_string(static_cast<int>(tiles)));
    Problem<Q> p = make_problem<Q>(c, seed++);
    p.hidden.row(5).setZero();
    p.hidden(9, 3) = std::numeric_limits<float>::infinity();
    cuda::Experts experts(p.w, p.mlp);
    experts.set_tiles(tiles);
    Matrix all = Matrix::Constant(c.T, c.H, std::nanf(""));
    experts.forward_routed(p.hidden, p.ids, p.weights, all);
    for (const index_t t : {1, 2, 3, 4}) {
      for (const index_t first : {index_t{0}, index_t{4}, index_t{8}}) {
        const Matrix hidden = p.hidden.middleRows(first, t), weights = p.weights.middleRows(first, t);
        const IdMatrix ids = p.ids.middleRows(first, t);
        Matrix out = Matrix::Constant(t, c.H, std::nanf(""));
        experts.forward_routed(hidden, ids, weights, out);
        index_t diff = 0;
        for (index_t i = 0; i < t; ++i)
          for (index_t r = 0; r < c.H; ++r)
            if (std::memcmp(&out(i, r), &all(first + i, r), sizeof(float)) != 0 && diff++ < 3)
              ADD_FAILURE() << Q::name << " tokens " << first << ".." << first + t - 1 << ": out[" << i << ", " << r
                            << "] = " << out(i, r) << ", in the batch of 64 " << all(first + i, r);
        EXPECT_EQ(diff, 0) << Q::name << " T=" << t << " from token " << first;
      }
    }
  }
}

TEST(CudaExperts, E4m3DecodeRowsAreTheBatchsBits) {
  REQUIRE_GPU();
  check_decode_rows<quant::fp8>(800, cuda::TileChoice::small, {200, 768});
  check_decode_rows<quant::fp8_block>(810, cuda::TileChoice::small, {200, 768});
}

// The same for every scheme of kernel::cuda's row and every tile shape.
TEST(CudaExperts, DecodeRowsAreTheBatchsBits) {
  REQUIRE_GPU();
  std::uint32_t seed = 820;
  boost::mp11::mp_for_each<
      boost::mp11::mp_transform<boost::mp11::mp_identity, pairing::kernel_schemes<cuda_table, kernel::cuda>>>(
      [&](auto id) {
        for (const auto tiles : {cuda::TileChoice::tiny, cuda::TileChoice::small, cuda::TileChoice::large,
                                 cuda::TileChoice::wide})
          check_decode_rows<typename decltype(id)::type>(seed += 2, tiles, {200});
      });
}

// The device quantizer against the CPU's (polymoe/quantize/fp8.hpp): codes and scales bit for bit,
// in groups of 128 and per row, from float32 and bfloat16 rows with a row stride (a multiple of 4:
// the vector loads; odd: one value at a time); all-zero, tiny (subnormal codes), huge, non-finite
// and single-value groups. Fewer rows than a block has warps take another path per row (the warps
// share a row's groups): 1, 2 and 3 rows of the same special rows, and 1100 columns (9 groups).
TEST(CudaQuantizeE4m3, BitExactWithTheCpu) {
  REQUIRE_GPU();
  namespace kq = polymoe::quantize;
  std::mt19937 rng(31);
  const std::pair<index_t, index_t> row_sets[] = {{9, 0}, {1, 7}, {2, 1}, {3, 4}};  // rows, first of the 9
  for (const bool bf16 : {false, true})
    for (const index_t cols : {index_t{1}, index_t{128}, index_t{200}, index_t{300}, index_t{1100}})
      for (const index_t group : {index_t{128}, index_t{0}})
        for (const index_t pad : {index_t{3}, index_t{4}})
          for (const auto& [rows, first] : row_sets) {
            SCOPED_TRACE(detail::concat("bf16=", bf16, " cols=", cols, " group=", group, " row stride=cols+", pad,
                                        " rows ", first, "-", first + rows - 1));
            const index_t ld = cols % 4 == 0 ? cols + pad : cols + 3, cp = cuda::e4m3_columns(cols), G = cp / 128;
            Matrix x9 = randn(9, ld, 1.0f, rng);
            for (index_t c = 0; c < ld; ++c) {
              x9(1, c) = 0.0f;                  // all zero
              x9(2, c) *= 0x1p-20f;             // subnormal codes
              x9(3, c) *= 0x1p60f;              // huge
              x9(5, c) = c % 2 ? -0.0f : 0.0f;  // signed zeros
            }
            x9(4, cols - 1) = INFINITY;  // non-finite: its group
            x9(6, cols / 2) = NAN;
            x9(7, 0) = 3.0f;             // one value far above the rest
            if (bf16)
              for (index_t i = 0; i < x9.size(); ++i)
                x9.data()[i] = codecs::bf16_to_float(codecs::float_to_bf16(x9.data()[i]));
            const Matrix x = x9.middleRows(first, rows);
            // expected: the CPU quantizer on each group of the row
            std::vector<std::uint8_t> want(static_cast<std::size_t>(rows * cp), 0);
            std::vector<float> want_s(static_cast<std::size_t>(rows * G));
            for (index_t r = 0; r < rows; ++r) {
              const index_t gl = group == 0 ? cols : group;
              for (index_t g0 = 0; g0 < cols; g0 += gl) {
                const index_t n = std::min(gl, cols - g0);
                const float a = kq::amax_if_finite(&x(r, g0), n);
                const float sc = std::isnan(a) ? NAN : kq::e4m3_scale(a);
                if (!std::isnan(a)) kq::quantize_e4m3(&x(r, g0), n, sc, want.data() + r * cp + g0);
                for (index_t b = g0 / 128; b < (group == 0 ? G : g0 / 128 + 1); ++b)
                  want_s[static_cast<std::size_t>(r * G + b)] = sc;
              }
            }
            const int d = cuda::current_device();
            cuda::device_array<float> src32(static_cast<std::size_t>(rows * ld)), scales(want_s.size());
            cuda::device_array<std::uint16_t> src16(static_cast<std::size_t>(rows * ld));
            cuda::device_array<std::uint8_t> codes(want.size());
            device_view src;
            if (bf16) {
              std::vector<std::uint16_t> b(static_cast<std::size_t>(rows * ld));
              for (std::size_t i = 0; i < b.size(); ++i) b[i] = codecs::float_to_bf16(x.data()[i]);
              src16.upload(b);
              src = device_view::of_bf16(src16.data(), rows, cols, d);
            } else {
              src32.upload({x.data(), static_cast<std::size_t>(x.size())});
              src = device_view::of(src32.data(), rows, cols, d);
            }
            src.row_stride = ld;
            cuda::quantize_e4m3(src, codes.data(), scales.data(), group, nullptr);
            cuda::synchronize(nullptr);
            std::vector<std::uint8_t> got(want.size());
            std::vector<float> got_s(want_s.size());
            codes.download(got);
            scales.download(got_s);
            for (index_t r = 0; r < rows; ++r) {
              for (index_t c = 0; c < cp; ++c)
                ASSERT_EQ(int(got[r * cp + c]), int(want[r * cp + c])) << "code of row " << r << " column " << c;
              for (index_t b = 0; b < G; ++b) {
                const float gs = got_s[r * G + b], ws = want_s[r * G + b];
                if (std::isnan(ws)) EXPECT_TRUE(std::isnan(gs)) << "scale of row " << r << " group " << b;
                else
                  EXPECT_EQ(std::memcmp(&gs, &ws, 4), 0)
                      << "scale of row " << r << " group " << b << ": " << gs << " vs " << ws;
              }
            }
          }
}

TEST(CudaQuantizeE4m3, BadInput) {
  REQUIRE_GPU();
  cuda::device_array<float> src(4096 * 16), scales(4);
  cuda::device_array<std::uint8_t> codes(256);
  std::vector<float> host(64);
  const int d = cuda::current_device();
  const device_view v = device_view::of(src.data(), 2, 32, d);
  expect_error([&] { cuda::quantize_e4m3(v, codes.data(), scales.data(), 64, nullptr); }, "group must be 128 or 0");
  expect_error([&] { cuda::quantize_e4m3(device_view::of(host.data(), 2, 32, d), codes.data(), scales.data(), 128, nullptr); },
               "is not device memory");
  expect_error([&] { cuda::quantize_e4m3(device_view::of(src.data(), 4096, 16, d), codes.data(), scales.data(), 128, nullptr); },
               "quantize_e4m3: codes (its last byte)");
  expect_error([&] { cuda::quantize_e4m3(v, codes.data(), src.data(), 128, nullptr); }, "must not share memory");
}

TEST(CudaExperts, FourBitWeightsStayFourBit) {
  REQUIRE_GPU();
  const Case c{8, 128, 128, 2, 7};
  const cuda::Experts mx(make_problem<quant::mxfp4_w4a16>(c, 1).w), nv(make_problem<quant::nvfp4_w4a16>(c, 1).w),
      bf(make_problem(c, 1).w);
  EXPECT_EQ(mx.weight_format(), "mxfp4");
  EXPECT_EQ(nv.weight_format(), "nvfp4");
  EXPECT_EQ(bf.weight_format(), "bf16");
  EXPECT_EQ(cuda::Experts(make_problem<quant::fp8_block>(c, 1).w).weight_format(), "fp8_block");
  EXPECT_EQ(cuda::Experts(make_problem<quant::fp8>(c, 1).w).weight_format(), "fp8");
}

// A bfloat16 out: the fp32 sum rounded once; accumulating adds out's value in fp32, then rounds.
TEST(CudaExperts, BfloatOutput) {
  REQUIRE_GPU();
  const Case c{8, 136, 72, 2, 33};
  Problem<> p = make_problem(c, 11);
  cuda::Experts experts(p.w, p.mlp);
  const int d = cuda::current_device();
  const auto n = static_cast<std::size_t>(c.T * c.H);
  cuda::device_array<float> x(n), w(static_cast<std::size_t>(c.T * c.k)), o32(n);
  cuda::device_array<std::int32_t> ids(static_cast<std::size_t>(c.T * c.k));
  cuda::device_array<std::uint16_t> o16(n);
  x.upload({p.hidden.data(), n});
  w.upload({p.weights.data(), w.size()});
  ids.upload({p.ids.data(), ids.size()});
  const device_view vx = device_view::of(x.data(), c.T, c.H, d), vi = device_view::of(ids.data(), c.T, c.k, d),
                    vw = device_view::of(w.data(), c.T, c.k, d), v32 = device_view::of(o32.data(), c.T, c.H, d),
                    v16 = device_view::of_bf16(o16.data(), c.T, c.H, d);
  experts.run(cuda::routed_call{vx, vi, vw, v32}, p.mlp, nullptr);
  experts.run(cuda::routed_call{vx, vi, vw, v16}, p.mlp, nullptr);
  cuda::synchronize(nullptr);
  std::vector<float> f(n);
  std::vector<std::uint16_t> b(n), b2(n);
  o32.download(f);
  o16.download(b);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(b[i], codecs::float_to_bf16(f[i])) << "element " << i;
  experts.run(cuda::routed_call{vx, vi, vw, v16, true}, p.mlp, nullptr);  // out += the same sum
  cuda::synchronize(nullptr);
  o16.download(b2);
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(b2[i], codecs::float_to_bf16(codecs::bf16_to_float(b[i]) + f[i])) << "element " << i;
}

// ---------------------------------------------------------------------------------------------
// Pair rows (what an expert-parallel dispatcher returns): each computed pair's own weighted row,
// where pair_rows puts it, equal to that slot alone as a top-1 forward; other rows untouched.

template <class Q>
void check_pair_rows(const Case& c, std::uint32_t seed) {
  SCOPED_TRACE(std::string(Q::name) + " " + describe(c));
  Problem<Q> p = make_problem<Q>(c, seed);
  cuda::Experts experts(p.w, p.mlp);
  experts.set_tiles(cuda::TileChoice::small);  // a row's result then does not depend on its batch
  const int d = cuda::current_device();
  const index_t pairs = c.T * c.k;
  std::vector<std::int32_t> rows(static_cast<std::size_t>(pairs), -1);
  index_t n = 0;
  for (index_t q = 0; q < pairs; ++q) n += p.ids.data()[q] >= 0;
  // computed pairs in reverse order, into rows [0, n); rows n..n+2 must stay as they are
  index_t next = n;
  for (index_t t = 0; t < c.T; ++t)
    for (index_t j = 0; j < c.k; ++j)
      if (p.ids(t, j) >= 0) rows[static_cast<std::size_t>(t * c.k + j)] = static_cast<std::int32_t>(--next);
  const IdMatrix ids = p.ids;
  cuda::device_array<float> x(static_cast<std::size_t>(c.T * c.H)), w(static_cast<std::size_t>(pairs)),
      out(static_cast<std::size_t>((n + 3) * c.H));
  cuda::device_array<std::int32_t> di(static_cast<std::size_t>(pairs)), dr(rows.size());
  x.upload({p.hidden.data(), x.size()});
  w.upload({p.weights.data(), w.size()});
  di.upload({ids.data(), di.size()});
  dr.upload(rows);
  std::vector<float> got(out.size(), -7.0f);
  out.upload(got);
  const device_view vx = device_view::of(x.data(), c.T, c.H, d), vi = device_view::of(di.data(), c.T, c.k, d),
                    vw = device_view::of(w.data(), c.T, c.k, d), vo = device_view::of(out.data(), n + 3, c.H, d),
                    vr = device_view::of(dr.data(), c.T, c.k, d);
  experts.run(cuda::routed_call{vx, vi, vw, vo, false, vr}, p.mlp, nullptr);
  cuda::synchronize(nullptr);
  out.download(got);
  for (index_t j = 0; j < c.k; ++j) {
    Matrix one(c.T, c.H);
    experts.forward_routed(p.hidden, p.ids.col(j), p.weights.col(j), one);
    for (index_t t = 0; t < c.T; ++t) {
      if (p.ids(t, j) < 0) continue;
      const float* g = got.data() + static_cast<std::size_t>(rows[static_cast<std::size_t>(t * c.k + j)] * c.H);
      for (index_t h = 0; h < c.H; ++h)
        ASSERT_EQ(g[h], one(t, h)) << "token " << t << " slot " << j << " column " << h;
    }
  }
  for (std::size_t i = static_cast<std::size_t>(n * c.H); i < got.size(); ++i) ASSERT_EQ(got[i], -7.0f) << "element " << i;
  // pair rows write, they do not accumulate; and they are fp32
  expect_error([&] { experts.run(cuda::routed_call{vx, vi, vw, vo, true, vr}, p.mlp, nullptr); }, "does not accumulate");
  cuda::device_array<std::uint16_t> o16(out.size());
  expect_error([&] {
    experts.run(cuda::routed_call{vx, vi, vw, device_view::of_bf16(o16.data(), n + 3, c.H, d), false, vr}, p.mlp,
                nullptr);
  }, "out is bfloat16, expected float32");
}

TEST(CudaExperts, PairRowsAreEachSlotsOwnRow) {
  REQUIRE_GPU();
  Case c{16, 136, 72, 4, 45};
  c.ids_pattern = 2;  // some slots not computed
  check_pair_rows<quant::bf16>(c, 21);
  check_pair_rows<quant::fp8_block>(c, 22);
  check_pair_rows<quant::mxfp4_w4a16>(c, 23);
  Case woi{8, 64, 40, 1, 20};
  woi.weight_on_input = true;  // the weight multiplies the input row: the row is still the slot's own
  check_pair_rows<quant::bf16>(woi, 24);
}

// ---------------------------------------------------------------------------------------------
// Device-pointer forward: run-to-run and graph replay bitwise, routing on the device.

void cuda_check(cudaError_t e, const char* what) { ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorName(e); }

template <class Q>
void check_deterministic_and_graph_replay(index_t T) {
  SCOPED_TRACE(std::string(Q::name) + " T=" + std::to_string(T));
  const Case c{64, 256, 192, 8, T};
  Problem<Q> p = make_problem<Q>(c, 7);
  std::mt19937 rng(8);
  const Matrix logits = randn(c.T, c.E, 1.0f, rng);
  RouterConfig rc;
  rc.top_k = c.k;
  const cuda::Router router(rc, c.E);
  cuda::Experts experts(p.w, p.mlp);
  cuda::device_array<float> x(static_cast<std::size_t>(p.hidden.size())), z(static_cast<std::size_t>(logits.size()));
  cuda::device_array<float> out1(static_cast<std::size_t>(c.T * c.H)), out2(out1.size()), out3(out1.size());
  x.upload({p.hidden.data(), static_cast<std::size_t>(p.hidden.size())});
  z.upload({logits.data(), static_cast<std::size_t>(logits.size())});
  cudaStream_t s = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  experts.forward(x.data(), c.T, z.data(), router, out1.data(), s);
  experts.forward(x.data(), c.T, z.data(), router, out2.data(), s);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  experts.forward(x.data(), c.T, z.data(), router, out3.data(), s);
  cuda_check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
  cuda_check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cuda_check(cudaMemsetAsync(out3.data(), 0xff, out3.size() * 4, s), "cudaMemsetAsync");
  cuda_check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
  cuda_check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
  cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  std::vector<float> a(out1.size()), b(out1.size()), g(out1.size());
  out1.download(a);
  out2.download(b);
  out3.download(g);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "two runs differ";
  EXPECT_EQ(0, std::memcmp(a.data(), g.data(), a.size() * 4)) << "graph replay differs from the eager run";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);

  // forward(logits) is forward_routed on the device's routing, bitwise
  const Routing r = router.route(logits);
  Matrix routed(c.T, c.H);
  experts.forward_routed(p.hidden, r.ids, r.weights, routed);
  EXPECT_EQ(0, std::memcmp(a.data(), routed.data(), a.size() * 4));
  // and close to the CPU's routing followed by the reference
  const Routing cpu = route(rc, c.E, logits);
  EXPECT_EQ(cpu.ids, r.ids);
}

TEST(CudaExperts, DeterministicAndGraphReplay) {
  REQUIRE_GPU();
  // every scheme of kernel::cuda's row
  boost::mp11::mp_for_each<
      boost::mp11::mp_transform<boost::mp11::mp_identity, pairing::kernel_schemes<cuda_table, kernel::cuda>>>(
      [](auto id) {
        // a batch, and a decode one (routing, sort and input rows in one launch)
        for (const index_t T : {300, 3}) check_deterministic_and_graph_replay<typename decltype(id)::type>(T);
      });
}

// ---------------------------------------------------------------------------------------------
// Bad input: polymoe::error before any launch, and no CUDA error left behind.

template <class F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << part << "'";
  } catch (const polymoe::error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("polymoe: ", 0), 0u) << what;
    EXPECT_NE(what.find(part), std::string::npos) << what;
  }
}

TEST(CudaExperts, BadInput) {
  REQUIRE_GPU();
  const Case c{8, 64, 32, 2, 4};
  Problem p = make_problem(c, 9);
  cuda::Experts experts(p.w, p.mlp);
  std::vector<float> host_x(static_cast<std::size_t>(c.T * c.H)), host_out(host_x.size()), host_w(8);
  std::vector<std::int32_t> host_ids(8);
  cuda::device_array<float> dx(host_x.size()), dout(host_x.size()), dw(8);
  cuda::device_array<std::int32_t> di(8);
  expect_error([&] { experts.forward_routed(host_x.data(), c.T, di.data(), dw.data(), 2, dout.data(), nullptr); },
               "hidden is not device memory");
  expect_error([&] { experts.forward_routed(dx.data(), c.T, host_ids.data(), dw.data(), 2, dout.data(), nullptr); },
               "topk_ids is not device memory");
  expect_error([&] { experts.forward_routed(dx.data(), c.T, di.data(), dw.data(), 2, host_out.data(), nullptr); },
               "out is not device memory");
  expect_error([&] { experts.forward_routed(dx.data(), c.T, di.data(), dw.data(), 9, dout.data(), nullptr); },
               "top_k must be in [1, 8]");
  expect_error([&] { experts.forward_routed(dx.data(), -1, di.data(), dw.data(), 2, dout.data(), nullptr); },
               "tokens must be >= 0");
  Matrix out(c.T, c.H + 1);
  expect_error([&] { experts.forward_routed(p.hidden, p.ids, p.weights, out); }, "out is [4, 65], expected [4, 64]");
  ExpertMlp gelu;
  gelu.activation.kind = Activation::silu;
  expect_error([&] { cuda::Experts bad(p.w, gelu); }, "the weights are gated");
  RouterConfig rc;
  rc.top_k = 9;
  expect_error([&] { cuda::Router bad(rc, 8); }, "top_k must be in [1, num_experts=8]");
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // T = 0 is a no-op
  experts.forward_routed(dx.data(), 0, di.data(), dw.data(), 2, dout.data(), nullptr);
  Matrix none(0, c.H);
  experts.forward_routed(Matrix(0, c.H), IdMatrix(0, 2), Matrix(0, 2), none);
}

}  // namespace
