// quant::int8_w8a8: per-channel weight scales, ties to even, saturation, per-token activations,
// the checkpoint factory, bad input (expectations worked out by hand).
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace polymoe;
namespace kq = polymoe::quantize;

namespace {

TEST(QuantInt8, RoundsHalfToEvenAndSaturates) {
  EXPECT_EQ(kq::round_to_int8(0.5f), 0);
  EXPECT_EQ(kq::round_to_int8(1.5f), 2);
  EXPECT_EQ(kq::round_to_int8(2.5f), 2);
  EXPECT_EQ(kq::round_to_int8(-2.5f), -2);
  EXPECT_EQ(kq::round_to_int8(-3.5f), -4);
  EXPECT_EQ(kq::round_to_int8(63.5f), 64);
  EXPECT_EQ(kq::round_to_int8(2.5000002f), 3);
  EXPECT_EQ(kq::round_to_int8(126.5f), 126);
  EXPECT_EQ(kq::round_to_int8(127.4f), 127);
  EXPECT_EQ(kq::round_to_int8(200.0f), 127);
  EXPECT_EQ(kq::round_to_int8(-128.4f), -128);
  EXPECT_EQ(kq::round_to_int8(-1e30f), -128);
  EXPECT_EQ(kq::round_to_int8(std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(kq::round_to_int8(-0.4f), 0);
}

TEST(QuantInt8, PerOutputChannelScalesByHand) {
  ExpertWeights f(ExpertShape{1, 5, 2, false, false});
  // row 0: amax 127 -> scale 1: 0.5 -> 0, 1.5 -> 2, -2.5 -> -2, 63.5 -> 64
  f.w13.row(0) << 127.0f, 0.5f, 1.5f, -2.5f, 63.5f;
  // row 1: amax 254 -> scale 2: 3 -> 1.5 -> 2, 5 -> 2.5 -> 2, -254 -> -127
  f.w13.row(1) << 3.0f, 5.0f, -254.0f, 0.0f, 0.0f;
  const auto w = quant::int8_w8a8::quantize(f);
  EXPECT_EQ(w.w13_scale, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(w.w13, (std::vector<std::int8_t>{127, 0, 2, -2, 64, 2, 2, -127, 0, 0}));
  EXPECT_EQ(w.w2_scale, std::vector<float>(5, 1.0f));  // all-zero rows: scale 1
  Matrix w13(2, 5), w2(5, 2);
  quant::int8_w8a8::dequantize(w, 0, w13, w2);
  EXPECT_EQ(w13(1, 0), 4.0f);
  EXPECT_EQ(w13(1, 2), -254.0f);
}

TEST(QuantInt8, PerTokenActivationsByHand) {
  std::vector<float> x = {-254.0f, 3.0f, 5.0f, 0.0f};  // scale 2: -127, 2, 2, 0
  quant::int8_w8a8::quantize_activation(x);
  EXPECT_EQ(x, (std::vector<float>{-254.0f, 4.0f, 4.0f, 0.0f}));
}

TEST(QuantInt8, FromCheckpointAndBadShapes) {
  std::mt19937 rng(4);
  const ExpertWeights f = test::random_experts(rng, ExpertShape{2, 6, 4, true, false});
  const auto q = quant::int8_w8a8::quantize(f);
  const auto w = quant::int8_w8a8::weights::from_checkpoint(f.shape, {q.w13, {2, 8, 6}}, {q.w13_scale, {2, 8}},
                                                            {q.w2, {2, 6, 4}}, {q.w2_scale, {2, 6}});
  EXPECT_EQ(w.w13, q.w13);
  EXPECT_EQ(w.w2_scale, q.w2_scale);
  try {
    (void)quant::int8_w8a8::weights::from_checkpoint(f.shape, {q.w13, {2, 8, 6}}, {q.w13_scale, {2}},
                                                     {q.w2, {2, 6, 4}}, {q.w2_scale, {2, 6}});
    ADD_FAILURE();
  } catch (const polymoe::error& e) {
    EXPECT_NE(std::string(e.what()).find("w13_scale has shape [2], expected [2, 8]"), std::string::npos) << e.what();
  }
  ExpertWeights bad = f;
  bad.w2(1, 1) = -std::numeric_limits<float>::infinity();
  EXPECT_THROW((void)quant::int8_w8a8::quantize(bad), polymoe::error);
}

}  // namespace
