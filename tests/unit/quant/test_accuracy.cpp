// Accuracy of each quant scheme on random data: one layer (E = 8, H = 512, I = 256, k = 2,
// silu-gated, T = 64, weights N(0, 1/fan_in), hidden N(0, 1)) quantized with the scheme, against
// the same layer in fp32, both on the reference kernel. Prints the figures docs/quantization.md
// quotes (run: ./build/tests/test_quant --gtest_filter='QuantAccuracy.*').
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include <boost/mp11/algorithm.hpp>
#include <tbb/global_control.h>

#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace polymoe;

namespace {

struct Figures {
  double rel_rms, rel_max;
};

template <class Q>
Figures measure(index_t H, index_t I) {
  std::mt19937 rng(2024);
  MoeConfig cfg;
  cfg.hidden = H;
  cfg.intermediate = I;
  cfg.num_experts = 8;
  cfg.router.top_k = 2;
  const MoeWeights w = test::random_weights(rng, cfg);
  const Matrix hidden = test::random_matrix(rng, 64, H);
  const Routing r = test::random_routing(rng, 64, 8, 2);
  MoeLayer<a2a::local, quant::fp32, kernel::reference> ref(cfg, w);
  MoeLayer<a2a::local, Q, kernel::reference> layer(cfg, w);
  const Matrix want = ref.forward_routed(hidden, r.ids, r.weights);
  const Matrix got = layer.forward_routed(hidden, r.ids, r.weights);
  return {std::sqrt((got - want).squaredNorm() / want.squaredNorm()), test::relative_error(got, want)};
}

template <class Q>
void check(double rms_bound) {
  const Figures a = measure<Q>(512, 256), b = measure<Q>(200, 72);  // b: K not a multiple of any block
  std::printf("| %-22s | %.4f | %.4f | %.4f |\n", std::string(Q::name).c_str(), a.rel_rms, a.rel_max, b.rel_rms);
  EXPECT_LE(a.rel_rms, rms_bound) << Q::name;
  EXPECT_LE(b.rel_rms, rms_bound) << Q::name;
  EXPECT_GT(a.rel_rms, 0.0) << Q::name;  // a quantized layer is not the fp32 one
}

TEST(QuantAccuracy, RelativeRmsErrorAgainstFp32) {
  std::printf("| scheme | rel. RMS (H=512, I=256) | max abs err / max abs | rel. RMS (H=200, I=72) |\n");
  // Bounds: about 1.5x the figures measured when the schemes were written (docs/quantization.md).
  check<quant::bf16>(0.01);
  check<quant::fp8>(0.09);
  check<quant::fp8_block>(0.09);
  check<quant::fp8_block_weight_only>(0.07);
  check<quant::int8_w8a8>(0.035);
  check<quant::int4_w4a8>(0.26);
  check<quant::mxfp4>(0.3);
  check<quant::nvfp4>(0.25);
  check<quant::nvfp4_w4a4>(0.35);
  check<quant::mxfp4_w4a16>(0.3);
  check<quant::nvfp4_w4a16>(0.25);
}

}  // namespace

// The encoders run their rows (or experts) in parallel: on one thread and on all they give the
// same store (compared through dequantize, bit for bit), and every row of a store larger than one
// parallel chunk is encoded (each row's error well below the row itself: a row left out would be 0).
namespace {

template <class Q>
void check_parallel_encoder() {
  SCOPED_TRACE(std::string(Q::name));
  std::mt19937 rng(77);
  const ExpertShape s{8, 200, 136, true, false};
  ExpertWeights f(s);
  f.w13 = test::random_matrix(rng, f.w13.rows(), f.w13.cols());
  f.w2 = test::random_matrix(rng, f.w2.rows(), f.w2.cols());
  typename Q::weights one;
  {
    tbb::global_control gc(tbb::global_control::max_allowed_parallelism, 1);
    one = Q::quantize(f);
  }
  const typename Q::weights all = Q::quantize(f);
  Matrix a13(s.rows13(), s.hidden), a2(s.hidden, s.intermediate), b13 = a13, b2 = a2;
  for (index_t e = 0; e < s.experts; ++e) {
    Q::dequantize(one, e, a13, a2);
    Q::dequantize(all, e, b13, b2);
    ASSERT_EQ(std::memcmp(a13.data(), b13.data(), sizeof(float) * a13.size()), 0) << "w13 of expert " << e;
    ASSERT_EQ(std::memcmp(a2.data(), b2.data(), sizeof(float) * a2.size()), 0) << "w2 of expert " << e;
    const auto check_rows = [&](const Matrix& got, const Matrix& want, index_t row0, const char* name) {
      for (index_t r = 0; r < got.rows(); ++r) {
        const double err = (got.row(r) - want.row(row0 + r)).norm(), norm = want.row(row0 + r).norm();
        ASSERT_LT(err, 0.3 * norm) << name << " row " << r << " of expert " << e;
      }
    };
    check_rows(b13, f.w13, e * s.rows13(), "w13");
    check_rows(b2, f.w2, e * s.hidden, "w2");
  }
}

TEST(QuantEncoders, ParallelRowsAreTheRowsOfOneThread) {
  namespace mp = boost::mp11;
  mp::mp_for_each<mp::mp_transform<mp::mp_identity, pairing::quants_of<core_table>>>(
      [](auto id) { check_parallel_encoder<typename decltype(id)::type>(); });
}

}  // namespace
