// quantize::amax and quantize::amax_if_finite (vectorized with AVX-512) against loops written
// here, on every length up to 100 and every position of the largest magnitude, an infinity and a
// NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <polymoe/quantize/common.hpp>
#include <random>
#include <vector>

namespace {

using polymoe::index_t;
namespace q = polymoe::quantize;

float oracle_amax(const std::vector<float>& x) {
  float m = 0.0f;
  for (float v : x)
    if (!std::isnan(v)) m = std::max(m, std::fabs(v));
  return m;
}

bool oracle_finite(const std::vector<float>& x) {
  return std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
}

std::vector<float> random_row(index_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& v : x) v = u(rng);
  return x;
}

TEST(QuantizeCommon, AmaxFindsTheLargestMagnitudeAnywhere) {
  std::mt19937 rng(11);
  for (index_t n = 0; n <= 100; ++n)
    for (index_t at = 0; at < n; ++at)
      for (float big : {7.5f, -7.5f}) {
        std::vector<float> x = random_row(n, rng);
        x[static_cast<std::size_t>(at)] = big;
        ASSERT_EQ(q::amax(x.data(), n), 7.5f) << "n " << n << " at " << at;
      }
  EXPECT_EQ(q::amax(nullptr, 0), 0.0f);
  const std::vector<float> zeros{-0.0f, 0.0f, -0.0f, -0.0f, 0.0f, 0.0f, 0.0f, 0.0f,
                                 -0.0f, 0.0f, -0.0f, -0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -0.0f};
  EXPECT_EQ(q::amax(zeros.data(), static_cast<index_t>(zeros.size())), 0.0f);
  EXPECT_FALSE(std::signbit(q::amax(zeros.data(), static_cast<index_t>(zeros.size()))));
}

TEST(QuantizeCommon, AmaxIgnoresNaNAndSeesInfinity) {
  std::mt19937 rng(12);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (index_t n : {1, 15, 16, 17, 31, 32, 33, 64, 100})
    for (index_t at = 0; at < n; ++at) {
      std::vector<float> x = random_row(n, rng);
      x[static_cast<std::size_t>(at)] = nan;
      ASSERT_EQ(q::amax(x.data(), n), oracle_amax(x)) << "NaN, n " << n << " at " << at;
      x[static_cast<std::size_t>(at)] = -inf;
      ASSERT_EQ(q::amax(x.data(), n), inf) << "-inf, n " << n << " at " << at;
    }
}

TEST(QuantizeCommon, AmaxIfFiniteIsTheAmaxOfAFiniteRowElseNaN) {
  std::mt19937 rng(14);
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  EXPECT_EQ(q::amax_if_finite(nullptr, 0), 0.0f);
  for (index_t n = 0; n <= 100; ++n) {
    std::vector<float> x = random_row(n, rng);
    x.push_back(std::numeric_limits<float>::max());  // finite, and the largest there is
    ASSERT_EQ(q::amax_if_finite(x.data(), n + 1), std::numeric_limits<float>::max()) << "n " << n + 1;
  }
  for (index_t n = 1; n <= 100; ++n)
    for (index_t at = 0; at < n; ++at) {
      std::vector<float> x = random_row(n, rng);
      x[static_cast<std::size_t>(at)] = at % 2 == 0 ? 7.5f : -7.5f;
      ASSERT_EQ(q::amax_if_finite(x.data(), n), 7.5f) << "n " << n << " at " << at;
      ASSERT_EQ(q::amax_if_finite(x.data(), n), oracle_amax(x)) << "n " << n << " at " << at;
      for (float b : bad) {
        std::vector<float> y = x;
        y[static_cast<std::size_t>(at)] = b;
        ASSERT_FALSE(oracle_finite(y));
        ASSERT_TRUE(std::isnan(q::amax_if_finite(y.data(), n))) << "n " << n << " at " << at << " value " << b;
        // a non-finite value past the end is not looked at
        if (at == n - 1 && n > 1) {
          ASSERT_EQ(q::amax_if_finite(y.data(), n - 1), oracle_amax(std::vector<float>(y.begin(), y.end() - 1)))
              << "n " << n - 1;
        }
      }
    }
}

}  // namespace
