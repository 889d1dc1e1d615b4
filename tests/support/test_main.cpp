// The main of the test programs: Google Test's, plus --tuning KEY=VALUE,... (or --tuning=...),
// which sets the tiled kernels' tuning for the whole run (test_tuning.hpp). Any other argument
// that Google Test does not take is an error, so a mistyped option does not pass unnoticed.
#include <cstdio>
#include <exception>
#include <string_view>

#include <gtest/gtest.h>

#include "test_tuning.hpp"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);  // takes its own --gtest_* flags out of argv
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view a = argv[i];
      if (a == "--tuning" && i + 1 < argc) {
        polymoe::test::tiled_tuning() = polymoe::kernels::tiled::parse_tuning(argv[++i], polymoe::test::tiled_tuning());
      } else if (a.starts_with("--tuning=")) {
        polymoe::test::tiled_tuning() =
            polymoe::kernels::tiled::parse_tuning(a.substr(9), polymoe::test::tiled_tuning());
      } else {
        std::fprintf(stderr, "%s: unknown argument '%s' (besides Google Test's flags: --tuning KEY=VALUE,...)\n",
                     argv[0], argv[i]);
        return 2;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 2;
  }
  if (polymoe::test::tiled_tuning() != polymoe::kernels::tiled::tuning{} && !GTEST_FLAG_GET(list_tests))
    std::printf("tiled kernels' tuning: %s\n",
                polymoe::kernels::tiled::to_string(polymoe::test::tiled_tuning()).c_str());
  return RUN_ALL_TESTS();
}
