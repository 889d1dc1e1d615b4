// quant::int4_w4a8: group scales, nibble packing, every code, ties to even, saturation, the
// activations (int8_w8a8's), the checkpoint factory, bad input (expectations worked out by hand).
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace polymoe;
namespace kq = polymoe::quantize;

namespace {

// The code each nibble stands for, written out: two's complement on four bits.
constexpr int nibble_value[16] = {0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1};

TEST(QuantInt4, RoundsHalfToEvenAndSaturates) {
  EXPECT_EQ(kq::round_to_int4(0.5f), 0);
  EXPECT_EQ(kq::round_to_int4(1.5f), 2);
  EXPECT_EQ(kq::round_to_int4(2.5f), 2);
  EXPECT_EQ(kq::round_to_int4(-2.5f), -2);
  EXPECT_EQ(kq::round_to_int4(-3.5f), -4);
  EXPECT_EQ(kq::round_to_int4(6.5f), 6);
  EXPECT_EQ(kq::round_to_int4(7.4f), 7);
  EXPECT_EQ(kq::round_to_int4(7.5f), 7);
  EXPECT_EQ(kq::round_to_int4(200.0f), 7);
  EXPECT_EQ(kq::round_to_int4(-8.4f), -8);
  EXPECT_EQ(kq::round_to_int4(-9.0f), -8);
  EXPECT_EQ(kq::round_to_int4(-1e30f), -8);
  EXPECT_EQ(kq::round_to_int4(std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(kq::round_to_int4(-0.4f), 0);
}

TEST(QuantInt4, EveryByteDecodesToItsTwoCodes) {
  // One group of 32 codes: byte i holds elements 2i (low nibble) and 2i + 1 (high nibble).
  for (int b = 0; b < 256; ++b) {
    std::vector<std::uint8_t> packed(16, 0);
    packed[5] = static_cast<std::uint8_t>(b);
    const float scale = 0.5f;
    float out[32];
    kq::dequantize_int4_row(packed.data(), &scale, 32, out);
    EXPECT_EQ(out[10], 0.5f * static_cast<float>(nibble_value[b & 15])) << b;
    EXPECT_EQ(out[11], 0.5f * static_cast<float>(nibble_value[b >> 4])) << b;
    EXPECT_EQ(out[9], 0.0f);
    EXPECT_EQ(out[12], 0.0f);
  }
}

TEST(QuantInt4, EveryCodeRoundTrips) {
  // Values c · 0.25 for c = -7..7 and the group's amax 1.75: s = 1.75 / 7 = 0.25 exactly, so each
  // value quantizes to its own code and decodes to itself.
  ExpertWeights f(ExpertShape{1, 32, 1, false, false});
  f.w13.setZero();
  f.w2.setZero();
  for (int c = -7; c <= 7; ++c) f.w13(0, c + 7) = 0.25f * static_cast<float>(c);
  const auto w = quant::int4_w4a8::quantize(f);
  EXPECT_EQ(w.w13_scale, std::vector<float>{0.25f});
  for (std::size_t i = 0; i < 15; ++i) {
    const int nib = (i % 2 ? w.w13[i / 2] >> 4 : w.w13[i / 2]) & 15;
    EXPECT_EQ(nibble_value[nib], static_cast<int>(i) - 7) << i;
  }
  Matrix w13(1, 32), w2(32, 1);
  quant::int4_w4a8::dequantize(w, 0, w13, w2);
  EXPECT_EQ(w13, f.w13);
}

TEST(QuantInt4, GroupScalesAndPackingByHand) {
  // w13: one row of H = 34 (a group of 32 and a partial group of 2); w2: 34 rows of I = 1.
  ExpertWeights f(ExpertShape{1, 34, 1, false, false});
  f.w13.setZero();
  f.w2.setZero();
  // group 0: amax 7 -> s = 1: 7 -> 7, -2.5 -> -2, 0.5 -> 0, 1.5 -> 2, -7 -> -7, 3.49 -> 3
  f.w13(0, 0) = 7.0f, f.w13(0, 1) = -2.5f, f.w13(0, 2) = 0.5f, f.w13(0, 3) = 1.5f, f.w13(0, 4) = -7.0f;
  f.w13(0, 5) = 3.49f;
  // group 1: amax 14 -> s = 2: -14 -> -7, 5 -> 2.5 -> 2
  f.w13(0, 32) = -14.0f, f.w13(0, 33) = 5.0f;
  f.w2(0, 0) = -3.5f;  // s = 0.5, code -7
  const auto w = quant::int4_w4a8::quantize(f);
  std::vector<std::uint8_t> want13(32, 0);
  want13[0] = 0xE7;   // 7 low, -2 (0xE) high
  want13[1] = 0x20;   // 0, 2
  want13[2] = 0x39;   // -7 (0x9), 3
  want13[16] = 0x29;  // -7, 2; byte 17 and the padding stay 0
  EXPECT_EQ(w.w13, want13);
  EXPECT_EQ(w.w13_scale, (std::vector<float>{1.0f, 2.0f}));
  std::vector<float> want_s2(34, 1.0f);  // all-zero groups: scale 1
  want_s2[0] = 0.5f;
  EXPECT_EQ(w.w2_scale, want_s2);
  std::vector<std::uint8_t> want2(34 * 16, 0);
  want2[0] = 0x09;
  EXPECT_EQ(w.w2, want2);
  Matrix w13(1, 34), w2(34, 1);
  quant::int4_w4a8::dequantize(w, 0, w13, w2);
  EXPECT_EQ(w13(0, 0), 7.0f);
  EXPECT_EQ(w13(0, 1), -2.0f);
  EXPECT_EQ(w13(0, 5), 3.0f);
  EXPECT_EQ(w13(0, 32), -14.0f);
  EXPECT_EQ(w13(0, 33), 4.0f);
  EXPECT_EQ(w2(0, 0), -3.5f);
  EXPECT_EQ(w2(1, 0), 0.0f);
}

TEST(QuantInt4, ActivationsAreInt8PerToken) {
  std::vector<float> x = {-254.0f, 3.0f, 5.0f, 0.0f};  // scale 2: -127, 2 (1.5), 2 (2.5), 0
  quant::int4_w4a8::quantize_activation(x);
  EXPECT_EQ(x, (std::vector<float>{-254.0f, 4.0f, 4.0f, 0.0f}));
}

TEST(QuantInt4, FromCheckpointAndBadInput) {
  std::mt19937 rng(4);
  const ExpertWeights f = test::random_experts(rng, ExpertShape{2, 40, 4, true, false});
  const auto q = quant::int4_w4a8::quantize(f);
  // w13 [2, 8, 2 groups · 16], w2 [2, 40, 1 group · 16]
  const auto w = quant::int4_w4a8::weights::from_checkpoint(f.shape, {q.w13, {2, 8, 32}}, {q.w13_scale, {2, 8, 2}},
                                                            {q.w2, {2, 40, 16}}, {q.w2_scale, {2, 40, 1}});
  EXPECT_EQ(w.w13, q.w13);
  EXPECT_EQ(w.w2_scale, q.w2_scale);
  const auto expect_error = [](auto make, const std::string& fragment) {
    try {
      make();
      ADD_FAILURE() << "no error";
    } catch (const polymoe::error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("polymoe:", 0), 0u) << e.what();
    }
  };
  expect_error([&] {
    (void)quant::int4_w4a8::weights::from_checkpoint(f.shape, {q.w13, {2, 8, 32}}, {q.w13_scale, {2, 8}},
                                                     {q.w2, {2, 40, 16}}, {q.w2_scale, {2, 40, 1}});
  }, "w13_scale has shape [2, 8], expected [2, 8, 2]");
  std::vector<float> bad_scale = q.w2_scale;
  bad_scale[7] = -1.0f;
  expect_error([&] {
    (void)quant::int4_w4a8::weights::from_checkpoint(f.shape, {q.w13, {2, 8, 32}}, {q.w13_scale, {2, 8, 2}},
                                                     {q.w2, {2, 40, 16}}, {bad_scale, {2, 40, 1}});
  }, "w2_scale[7] = -1 is not a finite, non-negative scale");
  ExpertWeights bad = f;
  bad.w2(1, 1) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW((void)quant::int4_w4a8::quantize(bad), polymoe::error);
}

}  // namespace
