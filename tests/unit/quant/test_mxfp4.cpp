// quant::mxfp4: the block quantizer bit by bit (expectations worked out by hand from the OCP MX
// rules), GPT-OSS's stored blocks run end to end against transformers, the interleaved re-layout,
// bad input.
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "quant_fixture.hpp"
#include "test_util.hpp"

using namespace polymoe;
namespace kq = polymoe::quantize;

namespace {

TEST(QuantMxfp4, BlockCodesByHand) {
  // amax 6: exponent floor(log2 6) - 2 = 0 -> scale code 127 (scale 1)
  float x[32] = {6.0f, 3.0f, -1.5f, 0.25f, 0.75f, 5.0f, 2.5f, -0.0f, -0.2f, 7.0f};
  std::uint8_t packed[16];
  EXPECT_EQ(kq::quantize_mxfp4_block(x, 32, packed), 127);
  // 6 -> 7; 3 -> 5; -1.5 -> 0xB; 0.25 ties to even code 0; 0.75 ties to even code 2 (1.0);
  // 5 ties to even code 6 (4.0); 2.5 ties to even code 4 (2.0); -0 -> +0; -0.2 -> +0 (zero is +0);
  // 7 saturates to 6 (code 7). Element 2i in the low nibble.
  const std::uint8_t want[16] = {0x57, 0x0B, 0x62, 0x04, 0x70};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(packed[i], want[i]) << "byte " << i;
  float back[32];
  kq::dequantize_mxfp4_row(packed, std::array<std::uint8_t, 1>{127}.data(), 32, back);
  EXPECT_EQ(back[4], 1.0f);
  EXPECT_EQ(back[5], 4.0f);
  EXPECT_EQ(back[9], 6.0f);
  EXPECT_FALSE(std::signbit(back[7]));
}

TEST(QuantMxfp4, ScaleCodesByHand) {
  std::uint8_t packed[16];
  const float small[1] = {0.1f};  // floor(log2 0.1) = -4 -> exponent -6 -> code 121; 6.4 -> 6
  EXPECT_EQ(kq::quantize_mxfp4_block(small, 1, packed), 121);
  EXPECT_EQ(packed[0], 0x07);
  const float big[2] = {7.9f, -4.0f};  // floor(log2 7.9) = 2 -> code 127; 7.9 saturates to 6
  EXPECT_EQ(kq::quantize_mxfp4_block(big, 2, packed), 127);
  EXPECT_EQ(packed[0], 0xE7);  // 6 -> 7 low; -4 -> 0xE high
  const float zeros[32] = {};
  EXPECT_EQ(kq::quantize_mxfp4_block(zeros, 32, packed), 0);  // all-zero block: smallest scale
  for (int i = 0; i < 16; ++i) EXPECT_EQ(packed[i], 0);
  const float eight[1] = {8.0f};  // floor(log2 8) = 3 -> exponent 1 -> code 128; 8 / 2 = 4 -> code 6
  EXPECT_EQ(kq::quantize_mxfp4_block(eight, 1, packed), 128);
  EXPECT_EQ(packed[0], 0x06);
}

TEST(QuantMxfp4, PartialLastBlockIsZeroPadded) {
  ExpertWeights f(ExpertShape{1, 40, 2, false, false});  // K = 40: blocks of 32 and 8
  f.w13(0, 33) = 3.0f;
  f.w13(0, 39) = -0.5f;
  const auto w = quant::mxfp4::quantize(f);
  ASSERT_EQ(w.w13_blocks.size(), 2u * 2 * 16);
  ASSERT_EQ(w.w13_scales.size(), 2u * 2);
  EXPECT_EQ(w.w13_scales[1], 126);  // amax 3: floor(log2 3) - 2 = -1
  EXPECT_EQ(w.w13_blocks[16], 0x70);  // element 33 = 3 / 0.5 = 6 -> code 7, high nibble
  EXPECT_EQ(w.w13_blocks[19], 0xA0);  // element 39 = -0.5 / 0.5 = -1 -> code 0xA, high nibble
}

TEST(QuantMxfp4, FixtureFromBlocksMatchesTransformers) {
  const auto qc = test::load_gpt_oss_mxfp4();
  MoeLayer<a2a::local, quant::mxfp4, kernel::reference> ref(qc.cfg, qc.weights);
  MoeLayer<a2a::local, quant::mxfp4, kernel::tbb_grouped> tbb(qc.cfg, qc.weights);
  MoeLayer<a2a::local, quant::mxfp4, kernel::tiled> tiled(qc.cfg, qc.weights, {},
                                                          test::make_kernel<kernel::tiled>());
  const double e_ref = test::relative_error(ref.forward(qc.hidden, qc.router_logits), qc.expected);
  const double e_tbb = test::relative_error(tbb.forward(qc.hidden, qc.router_logits), qc.expected);
  const double e_tiled = test::relative_error(tiled.forward(qc.hidden, qc.router_logits), qc.expected);
  std::printf("gpt_oss_mxfp4: reference %.3g, tbb_grouped %.3g, tiled %.3g\n", e_ref, e_tbb, e_tiled);
  EXPECT_LE(e_ref, 1e-5);
  EXPECT_LE(e_tbb, 1e-5);
  EXPECT_LE(e_tiled, 1e-5);
  EXPECT_LE(test::relative_error(ref.forward(qc.hidden), qc.expected), 1e-5);  // the layer's own router
}

// W4A16 on the same stored blocks: the activations rounded to bf16 move the result away from
// transformers' fp32 activations by bf16's error (the fixtures' guide: ~1e-2; measured 2.8e-3),
// never more, and measurably (the rounding is applied: W4A32 above agrees to 1e-5).
TEST(QuantMxfp4, FixtureFromBlocksWithBf16Activations) {
  const auto qc = test::load_gpt_oss_mxfp4();
  MoeLayer<a2a::local, quant::mxfp4_w4a16, kernel::reference> ref(qc.cfg, qc.weights);
  MoeLayer<a2a::local, quant::mxfp4_w4a16, kernel::tbb_grouped> tbb(qc.cfg, qc.weights);
  MoeLayer<a2a::local, quant::mxfp4_w4a16, kernel::tiled> tiled(qc.cfg, qc.weights, {},
                                                                test::make_kernel<kernel::tiled>());
  MoeLayer<a2a::local, quant::mxfp4_w4a16, kernel::tiled_amx> amx(qc.cfg, qc.weights, {},
                                                                  test::make_kernel<kernel::tiled_amx>());
  const Matrix want = ref.forward(qc.hidden, qc.router_logits);
  const double e_ref = test::relative_error(want, qc.expected);
  std::printf("gpt_oss_mxfp4 with bf16 activations: reference %.3g\n", e_ref);
  EXPECT_LE(e_ref, 1e-2);
  EXPECT_GT(e_ref, 1e-4);
  for (const Matrix& got : {tbb.forward(qc.hidden, qc.router_logits), tiled.forward(qc.hidden, qc.router_logits),
                            amx.forward(qc.hidden, qc.router_logits)})
    EXPECT_LE(test::kernel_agreement_error<quant::mxfp4_w4a16>(got, want), test::kernel_tolerance<quant::mxfp4_w4a16>);
}

TEST(QuantMxfp4, FixtureReadWithoutTheReLayoutMisses) {
  // The stored gate_up rows really are interleaved: read as stacked, the layer is wrong.
  const auto qc = test::load_gpt_oss_mxfp4(quant::gate_up_order::stacked);
  MoeLayer<a2a::local, quant::mxfp4, kernel::reference> ref(qc.cfg, qc.weights);
  EXPECT_GT(test::relative_error(ref.forward(qc.hidden, qc.router_logits), qc.expected), 1e-2);
}

TEST(QuantMxfp4, ReLaidRowsEqualDequantizeThenDeinterleave) {
  const auto relaid = test::load_gpt_oss_mxfp4(quant::gate_up_order::interleaved).weights.experts;
  const auto stored = test::load_gpt_oss_mxfp4(quant::gate_up_order::stacked).weights.experts;
  const ExpertShape s = relaid.shape();
  for (index_t e = 0; e < s.experts; ++e) {
    Matrix a13(s.rows13(), s.hidden), a2(s.hidden, s.intermediate), b13 = a13, b2 = a2;
    quant::mxfp4::dequantize(relaid, e, a13, a2);
    quant::mxfp4::dequantize(stored, e, b13, b2);  // rows still interleaved
    // deinterleave_gate_up takes [H, 2I] with gate/up in even/odd columns
    const Matrix want13 = deinterleave_gate_up(b13.transpose());
    EXPECT_TRUE((a13.array() == want13.array()).all()) << "expert " << e;
    EXPECT_TRUE((a2.array() == b2.array()).all());
    EXPECT_TRUE((relaid.b13.row(e).array() == deinterleave_bias(stored.b13.row(e)).array()).all());
  }
}

TEST(QuantMxfp4, QuantizeThenFromBlocksRoundTrips) {
  std::mt19937 rng(11);
  const ExpertWeights f = test::random_experts(rng, ExpertShape{2, 64, 40, true, true});
  const auto q = quant::mxfp4::quantize(f);
  const auto w = quant::mxfp4::weights::from_blocks(f.shape, {q.w13_blocks, {2, 80, 2, 16}}, {q.w13_scales, {2, 80, 2}},
                                                    {q.w2_blocks, {2, 64, 2, 16}}, {q.w2_scales, {2, 64, 2}}, f.b13,
                                                    f.b2);
  EXPECT_EQ(w.w13_blocks, q.w13_blocks);
  EXPECT_EQ(w.w2_scales, q.w2_scales);
}

TEST(QuantMxfp4, BadInputIsRejected) {
  const ExpertShape s{1, 32, 2, true, false};
  std::vector<std::uint8_t> b13(4 * 16), s13(4, 127), b2(32 * 16), s2(32, 127), s13_bad(4 * 2, 127);
  EXPECT_NO_THROW((void)quant::mxfp4::weights::from_blocks(s, {b13, {1, 4, 1, 16}}, {s13, {1, 4, 1}},
                                                           {b2, {1, 32, 1, 16}}, {s2, {1, 32, 1}}));
  auto message = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const polymoe::error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(message([&] {
              (void)quant::mxfp4::weights::from_blocks(s, {b13, {1, 4, 1, 16}}, {s13_bad, {1, 4, 2}},
                                                       {b2, {1, 32, 1, 16}}, {s2, {1, 32, 1}});
            }),
            "polymoe: quant::mxfp4::weights::from_blocks: w13_scales has shape [1, 4, 2], expected [1, 4, 1]");
  std::vector<std::uint8_t> s2_nan = s2;
  s2_nan[3] = 0xFF;
  EXPECT_EQ(message([&] {
              (void)quant::mxfp4::weights::from_blocks(s, {b13, {1, 4, 1, 16}}, {s13, {1, 4, 1}},
                                                       {b2, {1, 32, 1, 16}}, {s2_nan, {1, 32, 1}});
            }),
            "polymoe: quant::mxfp4::weights::from_blocks: w2_scales element 3 is the E8M0 NaN code 0xFF");
  EXPECT_NE(message([&] {
              (void)quant::mxfp4::weights::from_blocks(ExpertShape{1, 32, 4, false, false}, {b13, {1, 4, 1, 16}},
                                                       {s13, {1, 4, 1}}, {b2, {1, 32, 1, 16}}, {s2, {1, 32, 1}}, {},
                                                       {}, quant::gate_up_order::interleaved);
            }).find("needs a gated shape"),
            std::string::npos);
  ExpertWeights f(s);
  f.w13(1, 2) = std::numeric_limits<float>::infinity();
  EXPECT_NE(message([&] { (void)quant::mxfp4::quantize(f); }).find("w13[1, 2] = inf is not finite"),
            std::string::npos);
}

}  // namespace
