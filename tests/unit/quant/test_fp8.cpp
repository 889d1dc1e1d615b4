// quant::fp8 (per-tensor E4M3, per-token activations): scales and codes by hand, the checkpoint
// factory, bad input.
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace polymoe;
namespace kq = polymoe::quantize;

namespace {

TEST(QuantFp8, PerExpertPerProjectionScalesByHand) {
  ExpertWeights f(ExpertShape{2, 4, 3, true, false});
  f.w13_of(0)(0, 0) = 896.0f;  // expert 0 w13 amax 896 -> scale 2
  f.w13_of(0)(1, 1) = 3.0f;    // 1.5 -> 0x3C
  f.w13_of(0)(2, 2) = 2.125f;  // 1.0625: tie between 1 and 1.125 -> even 0x38
  f.w13_of(1)(5, 3) = -14.0f;  // expert 1 w13 amax 14 -> scale 1/32; -448 -> 0xFE
  f.w2_of(1)(0, 0) = 0.1f;     // expert 1 w2 amax 0.1 -> scale 0.1/448
  const auto w = quant::fp8::quantize(f);
  EXPECT_EQ(w.w13_scale, (std::vector<float>{2.0f, 1.0f / 32.0f}));
  EXPECT_EQ(w.w2_scale, (std::vector<float>{1.0f, 0.1f / 448.0f}));  // expert 0 w2 is all zero: scale 1
  EXPECT_EQ(w.w13[0], 0x7E);
  EXPECT_EQ(w.w13[1 * 4 + 1], 0x3C);
  EXPECT_EQ(w.w13[2 * 4 + 2], 0x38);
  EXPECT_EQ(w.w13[24 + 5 * 4 + 3], 0xFE);
  EXPECT_EQ(w.w2[12], 0x7E);
  Matrix w13(6, 4), w2(4, 3);
  quant::fp8::dequantize(w, 0, w13, w2);
  EXPECT_EQ(w13(0, 0), 896.0f);
  EXPECT_EQ(w13(2, 2), 2.0f);
  EXPECT_EQ(w2.cwiseAbs().maxCoeff(), 0.0f);
}

TEST(QuantFp8, SaturatesAtTheLargestCode) {
  const float x[4] = {1000.0f, -1e30f, 464.0f, std::numeric_limits<float>::infinity()};
  std::uint8_t q[4];
  kq::quantize_e4m3(x, 4, 1.0f, q);
  EXPECT_EQ(q[0], 0x7E);
  EXPECT_EQ(q[1], 0xFE);
  EXPECT_EQ(q[2], 0x7E);  // torch's plain cast would give 0x7E here too, 480 the NaN code
  EXPECT_EQ(q[3], 0x7E);
}

TEST(QuantFp8, PerTokenActivationsByHand) {
  std::vector<float> x = {7.0f, 0.1f, -3.0f, 0.0f};  // amax 7 -> scale 1/64
  quant::fp8::quantize_activation(x);
  EXPECT_EQ(x, (std::vector<float>{7.0f, 0.1015625f, -3.0f, 0.0f}));  // 6.4 -> 6.5; -192 exact
  std::vector<float> nan_row = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  quant::fp8::quantize_activation(nan_row);  // left as it is
  EXPECT_EQ(nan_row[0], 1.0f);
}

TEST(QuantFp8, FromCheckpointKeepsTheStoredCodes) {
  std::mt19937 rng(3);
  const ExpertWeights f = test::random_experts(rng, ExpertShape{3, 8, 5, true, true});
  const auto q = quant::fp8::quantize(f);
  const auto w = quant::fp8::weights::from_checkpoint(f.shape, {q.w13, {3, 10, 8}}, {q.w13_scale, {3}},
                                                      {q.w2, {3, 8, 5}}, {q.w2_scale, {3}}, f.b13, f.b2);
  EXPECT_EQ(w.w13, q.w13);
  EXPECT_EQ(w.w2_scale, q.w2_scale);
  EXPECT_THROW((void)quant::fp8::weights::from_checkpoint(f.shape, {q.w13, {3, 10, 8}}, {q.w13_scale, {3, 1}},
                                                          {q.w2, {3, 8, 5}}, {q.w2_scale, {3}}, f.b13, f.b2),
               polymoe::error);
  EXPECT_THROW((void)quant::fp8::weights::from_checkpoint(f.shape, {q.w13, {3, 10, 8}}, {q.w13_scale, {3}},
                                                          {q.w2, {3, 8, 5}}, {q.w2_scale, {3}}),  // biases missing
               polymoe::error);
  std::vector<std::uint8_t> nan_codes = q.w2;
  nan_codes[7] = 0x7F;
  try {
    (void)quant::fp8::weights::from_checkpoint(f.shape, {q.w13, {3, 10, 8}}, {q.w13_scale, {3}},
                                               {nan_codes, {3, 8, 5}}, {q.w2_scale, {3}}, f.b13, f.b2);
    ADD_FAILURE();
  } catch (const polymoe::error& e) {
    EXPECT_NE(std::string(e.what()).find("polymoe: quant::fp8::weights::from_checkpoint: w2 element 7 is an E4M3 NaN"),
              std::string::npos)
        << e.what();
  }
}

TEST(QuantFp8, NonFiniteWeightsAreRejected) {
  ExpertWeights f(ExpertShape{1, 4, 3, true, false});
  f.w13(2, 3) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW((void)quant::fp8::quantize(f), polymoe::error);
}

}  // namespace
