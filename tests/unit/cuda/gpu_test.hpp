#pragma once
// The CUDA tests' guard: REQUIRE_GPU() skips a test, with the reason, where no usable GPU is present.
#include <string>

#include <gtest/gtest.h>

#include <polymoe/cuda/experts.hpp>

namespace polymoe::test {
inline const std::string& gpu_missing() {
  static const std::string reason = cuda::unavailable_reason();
  return reason;
}
}  // namespace polymoe::test

#define REQUIRE_GPU()                                                                                   \
  do {                                                                                                  \
    if (!polymoe::test::gpu_missing().empty()) GTEST_SKIP() << "no usable GPU: " << polymoe::test::gpu_missing(); \
  } while (0)
