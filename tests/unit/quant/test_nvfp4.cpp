// quant::nvfp4 / nvfp4_w4a4: per-tensor scale_2, E4M3 block scales and E2M1 codes by hand
// (ModelOpt's convention, DESIGN.md), the W4A4 activation path, the checkpoint factory, bad input.
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace polymoe;
namespace kq = polymoe::kernels::quantize;

namespace {

TEST(QuantNvfp4, WeightCodesByHand) {
  ExpertWeights f(ExpertShape{1, 32, 16, false, false});  // w13 [16, 32]: two blocks per row
  f.w13(0, 0) = 2688.0f;   // tensor amax 2688 = 6 * 448 -> scale_2 = 1; block scale e4m3(448) = 0x7E
  f.w13(0, 1) = 1000.0f;   // 1000 / 448 = 2.23 -> 2 (code 4) -> 896
  f.w13(0, 16) = 24.0f;    // block amax 24 -> scale e4m3(4) = 0x48; 24 / 4 = 6 -> code 7
  f.w13(0, 17) = 10.0f;    // 10 / 4 = 2.5: tie between 2 and 3 -> even code 4 -> 8
  f.w13(0, 18) = -1.0f;    // -0.25: tie between 0 and 0.5 -> +0
  f.w13(2, 0) = 1e-6f;     // block scale 1e-6 / 6 rounds to E4M3 zero: the block decodes to 0
  const auto w = quant::nvfp4::quantize(f);
  EXPECT_EQ(w.w13_scale_2, std::vector<float>{1.0f});
  EXPECT_EQ(w.w2_scale_2, std::vector<float>{1.0f});  // all-zero tensor
  EXPECT_EQ(w.w13_scale[0], 0x7E);
  EXPECT_EQ(w.w13_scale[1], 0x48);
  EXPECT_EQ(w.w13_scale[2], 0x38);  // row 1: all-zero block gets scale 1.0
  EXPECT_EQ(w.w13_scale[4], 0x00);  // row 2, block 0
  EXPECT_EQ(w.w13[0], 0x47);        // elements 0, 1: codes 7 (low), 4 (high)
  EXPECT_EQ(w.w13[8], 0x47);        // elements 16, 17
  EXPECT_EQ(w.w13[9], 0x00);        // element 18 -> +0
  EXPECT_EQ(w.w13[2 * 16], 0x00);
  Matrix w13(16, 32), w2(32, 16);
  quant::nvfp4::dequantize(w, 0, w13, w2);
  EXPECT_EQ(w13(0, 0), 2688.0f);
  EXPECT_EQ(w13(0, 1), 896.0f);
  EXPECT_EQ(w13(0, 17), 8.0f);
  EXPECT_EQ(w13(2, 0), 0.0f);
}

TEST(QuantNvfp4, ScaleTwoIsPerExpertPerProjection) {
  ExpertWeights f(ExpertShape{2, 16, 16, false, false});
  f.w13_of(0)(0, 0) = 2688.0f;
  f.w13_of(1)(0, 0) = 5.25f;  // 5.25 / 2688 = 2^-9
  f.w2_of(1)(3, 3) = 1344.0f;
  const auto w = quant::nvfp4::quantize(f);
  EXPECT_EQ(w.w13_scale_2, (std::vector<float>{1.0f, 0x1p-9f}));
  EXPECT_EQ(w.w2_scale_2, (std::vector<float>{1.0f, 0.5f}));
}

TEST(QuantNvfp4, W4A4ActivationsByHand) {
  // row amax 5.25 -> input_scale 2^-9. Block 0: scale e4m3(5.25 / (6 * 2^-9)) = 448, so the
  // element divisor is 448 * 2^-9 = 0.875: 5.25 -> 6 -> 5.25; 1.25 -> 1.43 -> 1.5 -> 1.3125;
  // -0.75 -> -0.857 -> -1 -> -0.875; 0.3 -> 0.343 -> 0.5 -> 0.4375.
  // Block 1 = {2.625, 1}: scale e4m3(224) = 224, divisor 0.4375: 6 -> 2.625; 2.29 -> 2 -> 0.875.
  std::vector<float> x(18, 0.0f);
  x[0] = 5.25f, x[1] = 1.25f, x[2] = -0.75f, x[3] = 0.3f, x[16] = 2.625f, x[17] = 1.0f;
  std::vector<float> want(18, 0.0f);
  want[0] = 5.25f, want[1] = 1.3125f, want[2] = -0.875f, want[3] = 0.4375f, want[16] = 2.625f, want[17] = 0.875f;
  std::vector<float> y = x;
  quant::nvfp4_w4a4::quantize_activation(y);
  EXPECT_EQ(y, want);
  quant::nvfp4::quantize_activation(x);  // W4A16: untouched
  EXPECT_EQ(x[1], 1.25f);
}

TEST(QuantNvfp4, FromCheckpointAndBadInput) {
  std::mt19937 rng(6);
  const ExpertWeights f = test::random_experts(rng, ExpertShape{2, 20, 8, true, false});  // K = 20: padded
  const auto q = quant::nvfp4::quantize(f);
  ASSERT_EQ(q.w13.size(), 2u * 16 * 16);  // 2 blocks of 8 bytes per row
  const auto w = quant::nvfp4::weights::from_checkpoint(f.shape, {q.w13, {2, 16, 16}}, {q.w13_scale, {2, 16, 2}},
                                                        {q.w13_scale_2, {2}}, {q.w2, {2, 20, 8}},
                                                        {q.w2_scale, {2, 20, 1}}, {q.w2_scale_2, {2}});
  EXPECT_EQ(w.w13, q.w13);
  EXPECT_EQ(w.w2_scale_2, q.w2_scale_2);
  auto message = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const polymoe::error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(message([&] {
              (void)quant::nvfp4::weights::from_checkpoint(f.shape, {q.w13, {2, 16, 16}}, {q.w13_scale, {2, 16, 2}},
                                                           {q.w13_scale_2, {2}}, {q.w2, {2, 20, 8}},
                                                           {q.w2_scale, {2, 20, 2}}, {q.w2_scale_2, {2}});
            }),
            "polymoe: quant::nvfp4::weights::from_checkpoint: w2_scale has shape [2, 20, 2], expected [2, 20, 1]");
  std::vector<std::uint8_t> nan_scale = q.w13_scale;
  nan_scale[1] = 0xFF;
  EXPECT_NE(message([&] {
              (void)quant::nvfp4::weights::from_checkpoint(f.shape, {q.w13, {2, 16, 16}}, {nan_scale, {2, 16, 2}},
                                                           {q.w13_scale_2, {2}}, {q.w2, {2, 20, 8}},
                                                           {q.w2_scale, {2, 20, 1}}, {q.w2_scale_2, {2}});
            }).find("w13_scale element 1 is an E4M3 NaN code"),
            std::string::npos);
  std::vector<float> inf_s2 = {1.0f, std::numeric_limits<float>::infinity()};
  EXPECT_NE(message([&] {
              (void)quant::nvfp4::weights::from_checkpoint(f.shape, {q.w13, {2, 16, 16}}, {q.w13_scale, {2, 16, 2}},
                                                           {inf_s2, {2}}, {q.w2, {2, 20, 8}},
                                                           {q.w2_scale, {2, 20, 1}}, {q.w2_scale_2, {2}});
            }).find("w13_scale_2[1] = inf is not a finite, non-negative scale"),
            std::string::npos);
  ExpertWeights bad = f;
  bad.w13(0, 0) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW((void)quant::nvfp4_w4a4::quantize(bad), polymoe::error);
}

}  // namespace
