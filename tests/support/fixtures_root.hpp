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

/// $env when set, else the first directory `relative` found walking up from the working directory.
inline std::filesystem::path find_up(const char* env, const std::filesystem::path& relative) {
  if (const char* v = std::getenv(env); v && *v) return v;
  for (auto dir = std::filesystem::current_path();; dir = dir.parent_path()) {
    if (std::filesystem::is_directory(dir / relative)) return dir / relative;
    if (dir == dir.parent_path()) break;
  }
  throw std::runtime_error(std::string("polymoe tests: set ") + env + " to the " + relative.string() + " folder");
}

inline std::filesystem::path fixtures_root() { return find_up("POLYMOE_FIXTURES_DIR", "shared/fixtures"); }

/// Third-party results kept in the repository (tests/data, with the scripts that made them):
/// $POLYMOE_TEST_DATA_DIR, else the first `tests/data` found walking up from the working directory.
inline std::filesystem::path test_data_dir() { return find_up("POLYMOE_TEST_DATA_DIR", "tests/data"); }

}  // namespace polymoe::test
