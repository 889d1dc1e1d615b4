// quant::nvfp4 / nvfp4_w4a4: per-tensor scale_2, E4M3 block scales and E2M1 codes by hand
// (ModelOpt's convention, DESIGN.md), the W4A4 activation path, the checkpoint factory, bad input.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <polymoe/codecs/e4m3.hpp>

#include "test_util.hpp"

using namespace polymoe;
namespace kq = polymoe::quantize;

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

// ---- NVFP4 worked from DESIGN.md by brute force -----------------------------------------------

// The E2M1 magnitudes, written out here (code = sign << 3 | magnitude index).
constexpr double kE2m1Magnitudes[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

double e2m1_value(unsigned code) {
  const double v = kE2m1Magnitudes[code & 7u];
  return (code & 8u) != 0 ? -v : v;
}

// The E2M1 code nearest to q, searched over all 16 codes: ties go to the even code, anything past
// +-6 gets +-6 (saturation falls out of "nearest"), a zero result is written +0.
std::uint8_t nearest_e2m1(float q) {
  unsigned best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (unsigned c = 0; c < 16; ++c) {
    const double d = std::fabs(static_cast<double>(q) - e2m1_value(c));
    if (d < best_d || (d == best_d && (best & 1u) != 0 && (c & 1u) == 0)) best = c, best_d = d;
  }
  if (e2m1_value(best) == 0.0) best = 0;
  return static_cast<std::uint8_t>(best);
}

// The E4M3 code nearest to target >= 0, searched over all 256 codes less the two NaN codes
// (S.1111.111), each decoded with codecs::e4m3_to_float (tested against torch's table): ties go to
// the even code; anything past 448 gets 448 (0x7E, the largest finite code).
std::uint8_t nearest_e4m3(float target) {
  unsigned best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (unsigned c = 0; c < 256; ++c) {
    if ((c & 0x7Fu) == 0x7Fu) continue;
    const double v = static_cast<double>(codecs::e4m3_to_float(static_cast<std::uint8_t>(c)));
    const double d = std::fabs(static_cast<double>(target) - v);
    if (d < best_d || (d == best_d && (best & 1u) != 0 && (c & 1u) == 0)) best = c, best_d = d;
  }
  return static_cast<std::uint8_t>(best);
}

// What DESIGN.md's NVFP4 (ModelOpt's convention) makes of `m`, which stacks `experts` equal slices
// of rows (one projection of every expert), each slice with its own weight_scale_2; and statistics
// over the blocks that hold a non-zero value.
struct Nvfp4ByHand {
  std::vector<std::uint8_t> packed;  // [rows, ceil(K/16)*8], element 2i in the low nibble
  std::vector<std::uint8_t> scales;  // [rows, ceil(K/16)] E4M3 codes
  std::vector<float> scale_2;        // [experts]
  index_t blocks = 0;                // blocks holding a non-zero value
  index_t inexact_scales = 0;        // ... whose block_amax / (6 weight_scale_2) E4M3 cannot hold
  index_t subnormal_scales = 0;      // ... whose scale code is an E4M3 subnormal
  index_t zero_scales = 0;           // ... whose scale rounds to E4M3 zero (DESIGN.md leaves them open)
  index_t elements = 0;              // elements of those blocks (not the padding)
  index_t moved_elements = 0;        // ... whose code differs when divided by the unrounded scale
};

Nvfp4ByHand nvfp4_by_hand(const Matrix& m, index_t experts) {
  const index_t K = m.cols(), rows = m.rows() / experts, nb = (K + 15) / 16;
  Nvfp4ByHand out;
  out.packed.assign(static_cast<std::size_t>(m.rows() * nb * 8), 0);
  out.scales.assign(static_cast<std::size_t>(m.rows() * nb), 0);
  for (index_t e = 0; e < experts; ++e) {
    float amax = 0.0f;
    for (index_t r = e * rows; r < (e + 1) * rows; ++r)
      for (index_t c = 0; c < K; ++c) amax = std::max(amax, std::fabs(m(r, c)));
    const float scale_2 = amax / (6.0f * 448.0f);  // weight_scale_2 = amax / (6 * 448)
    out.scale_2.push_back(scale_2);
    for (index_t r = e * rows; r < (e + 1) * rows; ++r)
      for (index_t b = 0; b < nb; ++b) {
        const index_t c0 = 16 * b, n = std::min<index_t>(16, K - c0);
        float block_amax = 0.0f;
        for (index_t i = 0; i < n; ++i) block_amax = std::max(block_amax, std::fabs(m(r, c0 + i)));
        std::uint8_t code = 0x38;  // an all-zero block gets scale 1
        float target = 0.0f;
        if (block_amax > 0.0f) {
          target = block_amax / (6.0f * scale_2);
          code = nearest_e4m3(target);
          ++out.blocks;
          out.inexact_scales += (codecs::e4m3_to_float(code) != target);
          out.subnormal_scales += (code != 0 && (code >> 3) == 0);
          out.zero_scales += (code == 0);
        }
        out.scales[static_cast<std::size_t>(r * nb + b)] = code;
        const float divisor = codecs::e4m3_to_float(code) * scale_2;
        if (divisor == 0.0f) continue;  // a zero scale (counted above): codes left at 0
        for (index_t i = 0; i < n; ++i) {  // the padding (i >= n) stays code 0
          const float x = m(r, c0 + i);
          const std::uint8_t q = nearest_e2m1(x / divisor);
          out.packed[static_cast<std::size_t>((r * nb + b) * 8 + i / 2)] |=
              static_cast<std::uint8_t>(q << (4 * (i % 2)));
          if (block_amax > 0.0f) {
            ++out.elements;
            out.moved_elements += (nearest_e2m1(x / (target * scale_2)) != q);
          }
        }
      }
  }
  return out;
}

// "" when equal, else how many bytes differ and the first, as [row, column] of a [rows, per_row] tensor.
std::string differences(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                        index_t per_row) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + ", want " + std::to_string(want.size());
  std::size_t count = 0, first = 0;
  for (std::size_t i = got.size(); i-- > 0;)
    if (got[i] != want[i]) ++count, first = i;
  if (count == 0) return "";
  const auto n = static_cast<std::size_t>(per_row);
  std::ostringstream os;
  os << count << " of " << got.size() << " bytes differ; first at [" << first / n << ", " << first % n << "]: got 0x"
     << std::hex << static_cast<int>(got[first]) << ", want 0x" << static_cast<int>(want[first]);
  return os.str();
}

// Rows of each expert's slice scaled by 2^-(r % 8), so that block scales spread over E4M3's
// exponents; in every slice, block 0 of row 1 scaled by a further 2^-14 (an E4M3 subnormal block
// scale, still far from rounding to zero) and block 0 of row 2 zeroed (scale 1).
void spread_blocks(Matrix& m, index_t experts) {
  const index_t rows = m.rows() / experts;
  for (index_t e = 0; e < experts; ++e)
    for (index_t r = 0; r < rows; ++r) {
      auto x = m.row(e * rows + r);
      x *= std::ldexp(1.0f, -static_cast<int>(r % 8));
      if (r == 1) x.head(16) *= 0x1p-14f;
      if (r == 2) x.head(16).setZero();
    }
}

TEST(QuantNvfp4, BlockScalesThatE4M3CannotHoldFollowTheDecodedScale) {
  // Random weights against DESIGN.md's NVFP4 worked here by brute force: weight_scale_2 = amax /
  // (6 * 448) per expert per projection (w13: gate and up together); block scale = the E4M3 code
  // nearest to block_amax / (6 * weight_scale_2); elements = the E2M1 code nearest to x / (decoded
  // block scale * weight_scale_2). Almost no block scale is an E4M3 value, so elements divided by
  // the unrounded scale would get other codes: the quantizer must divide by the decoded one.
  const ExpertShape shapes[] = {
      {3, 40, 24, true, false},   // H and I not multiples of 16: last blocks of 8
      {2, 19, 33, false, false},  // non-gated; last blocks of 3 (w13) and 1 (w2) elements
      {2, 32, 48, true, false},   // whole blocks only
  };
  Nvfp4ByHand total;  // statistics over every case
  for (const ExpertShape& s : shapes)
    for (unsigned seed : {11u, 12u, 13u}) {
      SCOPED_TRACE(::testing::Message() << "shape " << s << ", seed " << seed);
      std::mt19937 rng(seed);
      ExpertWeights f = test::random_experts(rng, s);
      ASSERT_GE(s.hidden, 16);
      ASSERT_GE(s.intermediate, 16);
      spread_blocks(f.w13, s.experts);
      spread_blocks(f.w2, s.experts);
      const auto q = quant::nvfp4::quantize(f);
      const Nvfp4ByHand w13 = nvfp4_by_hand(f.w13, s.experts), w2 = nvfp4_by_hand(f.w2, s.experts);
      const index_t nbH = (s.hidden + 15) / 16, nbI = (s.intermediate + 15) / 16;
      EXPECT_EQ(q.w13_scale_2, w13.scale_2);
      EXPECT_EQ(q.w2_scale_2, w2.scale_2);
      EXPECT_EQ(differences(q.w13_scale, w13.scales, nbH), "") << "w13_scale [E*rows13, ceil(H/16)]";
      EXPECT_EQ(differences(q.w13, w13.packed, nbH * 8), "") << "w13 [E*rows13, ceil(H/16)*8]";
      EXPECT_EQ(differences(q.w2_scale, w2.scales, nbI), "") << "w2_scale [E*H, ceil(I/16)]";
      EXPECT_EQ(differences(q.w2, w2.packed, nbI * 8), "") << "w2 [E*H, ceil(I/16)*8]";
      for (const Nvfp4ByHand* h : {&w13, &w2}) {
        total.blocks += h->blocks;
        total.inexact_scales += h->inexact_scales;
        total.subnormal_scales += h->subnormal_scales;
        total.zero_scales += h->zero_scales;
        total.elements += h->elements;
        total.moved_elements += h->moved_elements;
      }
    }
  // The cases test what the name says: nearly every block scale is rounded, some are E4M3
  // subnormals, and the rounding moves a share of the element codes.
  EXPECT_EQ(total.zero_scales, 0) << "the data must avoid block scales that round to E4M3 zero";
  EXPECT_GE(10 * total.inexact_scales, 9 * total.blocks) << total.inexact_scales << " of " << total.blocks;
  EXPECT_GT(total.subnormal_scales, 0);
  EXPECT_GT(200 * total.moved_elements, total.elements) << total.moved_elements << " of " << total.elements;
}

}  // namespace
