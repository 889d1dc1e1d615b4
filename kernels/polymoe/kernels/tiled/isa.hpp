#pragma once
// What the tiled kernels were compiled for and what this machine runs, as words for a tool's
// --version line and a benchmark's context block.
#include <string>

#include <polymoe/kernels/tiled/amx_cpu.hpp>
#include <polymoe/kernels/tiled/microkernel.hpp>

namespace polymoe::kernels::tiled {

/// The instruction-set paths compiled in: "AVX-512, AVX-512 BF16 dot products, AMX tiles" or
/// "portable loops (built without AVX-512)".
[[nodiscard]] inline std::string compiled_paths() {
#if defined(POLYMOE_TILED_AVX512)
  std::string s = "AVX-512";
  if (POLYMOE_TILED_DPBF16) s += ", AVX-512 BF16 dot products";
#if defined(POLYMOE_TILED_AMX_CODE)
  s += ", AMX tiles";
#endif
  return s;
#else
  return "portable loops (built without AVX-512)";
#endif
}

/// Whether this machine runs the AMX tiles: "AMX tiles run", or "no AMX tiles: <why>".
[[nodiscard]] inline std::string machine_paths() {
#if defined(POLYMOE_TILED_AMX_CODE)
  const char* why = amx_unavailable_reason();
  return why ? std::string("no AMX tiles: ") + why : std::string("AMX tiles run");
#else
  return "no AMX tile code compiled in";
#endif
}

}  // namespace polymoe::kernels::tiled
