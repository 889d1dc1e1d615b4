#pragma once
// Where ../shared/fixtures is: $POLYMOE_FIXTURES_DIR (ctest sets it), else the first
// `shared/fixtures` found walking up from the working directory. Read at run time rather than
// compiled in, so no absolute path enters the compile flags (ccache then reuses objects across
// clones).
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace polymoe::test {
inline std::filesystem::path fixtures_root() {
  if (const char* env = std::getenv("POLYMOE_FIXTURES_DIR"); env && *env) return env;
  for (auto dir = std::filesystem::current_path(); ; dir = dir.parent_path()) {
    if (std::filesystem::is_directory(dir / "shared" / "fixtures")) return dir / "shared" / "fixtures";
    if (dir == dir.parent_path()) break;
  }
  throw std::runtime_error("polymoe tests: set POLYMOE_FIXTURES_DIR to the shared/fixtures folder");
}

/// Third-party results kept in the repository (tests/data, with the scripts that made them):
/// $POLYMOE_TEST_DATA_DIR, else the first `tests/data` found walking up from the working directory.
inline std::filesystem::path test_data_dir() {
  if (const char* env = std::getenv("POLYMOE_TEST_DATA_DIR"); env && *env) return env;
  for (auto dir = std::filesystem::current_path(); ; dir = dir.parent_path()) {
    if (std::filesystem::is_directory(dir / "tests" / "data")) return dir / "tests" / "data";
    if (dir == dir.parent_path()) break;
  }
  throw std::runtime_error("polymoe tests: set POLYMOE_TEST_DATA_DIR to the repository's tests/data folder");
}
}  // namespace polymoe::test
