#pragma once
// What the tiled kernels were compiled for and what this machine runs, as words for a tool's
// --version line, a layer's describe() and a benchmark's context block.
#include <string>

#include <polymoe/kernels/tiled/level.hpp>

namespace polymoe::kernels::tiled {

/// The levels compiled in, best first (a pinned build: native only).
[[nodiscard]] inline constexpr auto compiled_levels() noexcept {
  struct levels {
    isa_level at[4];
    int size;
  };
  if constexpr (run_time_isa)
    return levels{{isa_level::avx512_zen, isa_level::avx512_vnni_bf16, isa_level::avx512, isa_level::portable}, 4};
  else
    return levels{{isa_level::native, isa_level::native, isa_level::native, isa_level::native}, 1};
}

/// The level a layer prepared now runs: the best compiled in that this CPU runs.
[[nodiscard]] inline isa_level level_here() noexcept {
  const auto levels = compiled_levels();
  for (int i = 0; i < levels.size; ++i)
    if (level_runs_here(levels.at[i])) return levels.at[i];
  return isa_level::portable;
}

/// The level a layer runs for a tuning's choice (tuning::isa: native is the best here).
[[nodiscard]] inline isa_level level_for(isa_level wanted) noexcept {
  return wanted == isa_level::native ? level_here() : wanted;
}

/// Whether the level runs AVX-512 code (and so may run the AMX tiles).
[[nodiscard]] inline constexpr bool level_has_avx512(isa_level l) noexcept {
  return l == isa_level::avx512 || l == isa_level::avx512_vnni_bf16 || l == isa_level::avx512_zen ||
         (l == isa_level::native && native_avx512);
}

/// Whether kernel::tiled_amx runs its tiles here: the level it runs (for tuning::isa `wanted`) has the tile code and the CPU
/// and OS run the tiles.
[[nodiscard]] inline bool amx_runs_here(isa_level wanted = isa_level::native) noexcept {
#if defined(__x86_64__) && defined(__linux__)
  return level_has_avx512(level_for(wanted)) && amx_cpu_reason() == nullptr;
#else
  return false;
#endif
}

/// The instruction-set paths compiled in: "AVX-512, AVX-512 BF16 dot products, AMX tiles",
/// "portable loops (built without AVX-512)", or a run-time choice's levels.
[[nodiscard]] inline std::string compiled_paths() {
  if constexpr (run_time_isa) {
    return std::string("chosen at run time among ") + level_words(isa_level::avx512_zen) + "; " +
           level_words(isa_level::avx512_vnni_bf16) + " and AMX tiles; " + level_words(isa_level::avx512) + "; " +
           level_words(isa_level::portable);
  } else {
#if POLYMOE_TILED_AVX512 && !POLYMOE_TILED_DISPATCH
    std::string s = "AVX-512";
    if (POLYMOE_TILED_DPBF16) s += ", AVX-512 BF16 dot products";
#if POLYMOE_TILED_AMX_CODE
    s += ", AMX tiles";
#endif
    return s;
#else
    return "portable loops (built without AVX-512)";
#endif
  }
}

/// What this machine runs: the level, and whether the AMX tiles run ("AMX tiles run", or "no
/// AMX tiles: <why>").
[[nodiscard]] inline std::string machine_paths() {
  std::string s;
  if constexpr (run_time_isa) s = std::string("runs ") + level_words(level_here()) + "; ";
  if (!level_has_avx512(level_here())) return s + "no AMX tile code for this level";
  const char* why = amx_cpu_reason();
  return s + (why ? std::string("no AMX tiles: ") + why : std::string("AMX tiles run"));
}

}  // namespace polymoe::kernels::tiled
