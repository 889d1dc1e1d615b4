// Activation wire formats (kernels/polymoe/quantize/wire.hpp): a row that travels quantized
// and is decoded must requantize, under the scheme's own activation quantizer, to exactly what the
// sender's row quantizes to; rows the codec cannot carry exactly are declined; record sizes; and
// which wire a (dispatcher, scheme) pair uses.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include <gtest/gtest.h>
#include <polymoe/polymoe.hpp>
#include <polymoe/quantize/wire.hpp>

using namespace polymoe;
using polymoe::quantize::wire_codec;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Encodes `x`; if the codec accepts it, decodes and checks that Q's activation quantizer gives
/// the same bits on the decoded row as on the original. Returns whether the codec accepted it.
template <class W, class Q>
bool round_trip_is_exact(const std::vector<float>& x, const char* what) {
  using codec = wire_codec<W>;
  const auto H = static_cast<index_t>(x.size());
  std::vector<std::byte> rec(codec::bytes(H));
  if (!codec::encode(x.data(), H, rec.data())) return false;
  std::vector<float> y(x.size());
  codec::decode(rec.data(), H, y.data());
  std::vector<float> qx = x, qy = y;
  Q::quantize_activation(std::span<float>(qx));
  Q::quantize_activation(std::span<float>(qy));
  EXPECT_TRUE(same_bits(qx, qy)) << what << ": H=" << H;
  return true;
}

/// Rows of one magnitude: random normal values times `scale`, with zeros, negative zeros and a
/// few values at the group's extremes sprinkled in.
std::vector<float> row(std::mt19937& rng, index_t H, float scale) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(H));
  for (float& v : x) v = n(rng) * scale;
  std::uniform_int_distribution<index_t> at(0, H - 1);
  x[at(rng)] = 0.0f;
  x[at(rng)] = -0.0f;
  x[at(rng)] = -std::fabs(x[at(rng)]) * 1.5f;  // a negative maximum
  return x;
}

template <class W, class Q>
void many_rows_round_trip(const char* what) {
  std::mt19937 rng(11);
  int accepted = 0, rows = 0;
  for (index_t H : {7, 128, 129, 300, 2048})
    for (float scale : {1.0f, 3.1e-3f, 7.7e5f, 1e-25f, 1e30f, 2e36f})
      for (int rep = 0; rep < 20; ++rep, ++rows) accepted += round_trip_is_exact<W, Q>(row(rng, H, scale), what);
  EXPECT_EQ(accepted, rows) << what << ": every finite row of normal magnitude travels quantized";
}

TEST(Wire, E4M3GroupsOf128RequantizeExactly) { many_rows_round_trip<wire::e4m3<128>, quant::fp8_block>("fp8_block"); }
TEST(Wire, E4M3PerTokenRequantizesExactly) { many_rows_round_trip<wire::e4m3<0>, quant::fp8>("fp8"); }
TEST(Wire, Int8PerTokenRequantizesExactly) { many_rows_round_trip<wire::int8_rows, quant::int8_w8a8>("int8_w8a8"); }

// Several values at the top code (the amax and values within half a code step of it) and every
// mantissa pattern of the amax across a binade: the decoded group must keep amax and scale.
TEST(Wire, ValuesAtTheTopCodeKeepTheAmax) {
  int rows = 0;
  for (float a = 1.0f; a < 2.0f; a = std::nextafter(a, 2.0f) + 1.3e-5f, ++rows) {
    const std::vector<float> x = {a, -a * 0.97f, a * 0.9999f, 0.0f, -a, a * 0.3f, -a * 0.999f};
    EXPECT_TRUE((round_trip_is_exact<wire::e4m3<128>, quant::fp8_block>(x, "fp8_block, top codes")));
    EXPECT_TRUE((round_trip_is_exact<wire::int8_rows, quant::int8_w8a8>(x, "int8, top codes")));
  }
  EXPECT_GT(rows, 50000);
}

// The codec's branch-free encoders against the quantizers' scalar codes: every 61st float from 0
// to beyond the saturation point, both signs (all exponents, subnormal E4M3 results, ties), and
// every half-integer and its neighbours for int8.
TEST(Wire, BranchFreeCodesEqualTheQuantizers) {
  namespace d = polymoe::quantize::detail;
  long checked = 0, e4m3_wrong = 0, int8_wrong = 0;
  for (std::uint32_t bits = 0; bits < 0x44800000u; bits += 61)
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      const float x = std::bit_cast<float>(bits | sign);
      std::uint8_t q;
      d::e4m3_codes::encode(&x, 1, 1.0f, &q);
      e4m3_wrong += q != codecs::float_to_e4m3_sat(x);
      ++checked;
    }
  for (int h = -300; h <= 300; ++h)
    for (float x : {h * 0.5f, std::nextafter(h * 0.5f, -1e9f), std::nextafter(h * 0.5f, 1e9f)}) {
      std::uint8_t q;
      d::int8_codes::encode(&x, 1, 1.0f, &q);
      int8_wrong += static_cast<std::int8_t>(q) != polymoe::quantize::round_to_int8(x);
    }
  EXPECT_GT(checked, 3'000'000);
  EXPECT_EQ(e4m3_wrong, 0);
  EXPECT_EQ(int8_wrong, 0);
}

TEST(Wire, RowsThatCannotTravelQuantizedAreDeclined) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::vector<float>& x : std::vector<std::vector<float>>{
           {1.0f, nan, 2.0f}, {1.0f, -inf, 2.0f}, {3e-31f, -1e-31f, 0.0f} /* amax below 2^-100 */}) {
    EXPECT_FALSE((round_trip_is_exact<wire::e4m3<128>, quant::fp8_block>(x, "e4m3")));
    EXPECT_FALSE((round_trip_is_exact<wire::int8_rows, quant::int8_w8a8>(x, "int8")));
  }
  // A non-finite value declines the row even when it sits in another group of 128.
  std::vector<float> x(200, 1.0f);
  x[150] = inf;
  EXPECT_FALSE((round_trip_is_exact<wire::e4m3<128>, quant::fp8_block>(x, "e4m3, second group")));
  // All-zero rows: E4M3 keeps the signs of its zeros; int8 cannot, so it declines.
  const std::vector<float> zeros = {0.0f, -0.0f, 0.0f};
  EXPECT_TRUE((round_trip_is_exact<wire::e4m3<128>, quant::fp8_block>(zeros, "e4m3 zeros")));
  EXPECT_FALSE((round_trip_is_exact<wire::int8_rows, quant::int8_w8a8>(zeros, "int8 zeros")));
}

TEST(Wire, RecordSizes) {
  // fp8_block: H codes + one fp32 amax per group of 128, padded to 4 bytes.
  EXPECT_EQ(wire_codec<wire::e4m3<128>>::bytes(2048), 2048u + 16u * 4u);
  EXPECT_EQ(wire_codec<wire::e4m3<128>>::bytes(130), 132u + 2u * 4u);
  EXPECT_EQ(wire_codec<wire::e4m3<0>>::bytes(7168), 7168u + 4u);
  EXPECT_EQ(wire_codec<wire::int8_rows>::bytes(2049), 2052u + 4u);
  EXPECT_EQ(wire_codec<wire::fp32>::bytes(2048), 2048u * 4u);
}

TEST(Wire, WhichWireALayerUses) {
  static_assert(std::is_same_v<activation_wire_t<quant::fp8_block>, wire::e4m3<128>>);
  static_assert(std::is_same_v<activation_wire_t<quant::fp8_block_weight_only>, wire::fp32>);
  static_assert(std::is_same_v<activation_wire_t<quant::bf16>, wire::fp32>);
  static_assert(std::is_same_v<activation_wire_t<quant::int8_w8a8>, wire::int8_rows>);
  static_assert(std::is_same_v<wire_of<a2a::local, quant::fp8_block>, wire::fp32>);  // local carries nothing
  SUCCEED();
}

}  // namespace
