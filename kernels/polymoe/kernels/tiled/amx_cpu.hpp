// Whether AMX runs here: a build that targets it (amx_target), or the run-time test (CPUID, the
// OS's XCR0 bits, Linux's permission request for the tile data), and from how many rows per block
// the tiles pay (the measured thresholds of bf16 and int8).
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_AMX_CPU) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_AMX_CPU
#undef POLYMOE_TILED_GUARD_AMX_CPU
#else
#define POLYMOE_TILED_GUARD_AMX_CPU
#endif
#include <cstdint>

#include <polymoe/core/error.hpp>
#include <polymoe/core/types.hpp>
#include <polymoe/kernels/tiled/microkernel.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AMX_INT8__) && POLYMOE_TILED_AMX_CODE && \
    !POLYMOE_TILED_DISPATCH
inline constexpr bool amx_target = true;  ///< the build targets AMX: no run-time detection
#else
inline constexpr bool amx_target = false;
#endif

/// Rows per block from which the tiles are used (below: AVX-512), bf16 and int8. Measured
/// (docs/decisions.md#amx-min-rows): on the 2-core machine bf16 blocks of 8 rows ran faster on tiles
/// than on the FMA loop, blocks of 4 slower; on the device machine (2 threads, three alternating
/// runs) int8 blocks of about 32 rows ran 6-28 % faster on tiles than on VNNI, blocks of 16 as
/// fast either way (both on the VNNI layout, before int8 had a tile layout). tuning::amx_min_rows
/// overrides both, and every other format's threshold (tuning::tiles_from).
inline constexpr index_t amx_min_rows_bf16 = 8;
inline constexpr index_t amx_min_rows_int8 = 16;

/// Why AMX cannot run here, or nullptr when it can: the level's code (POLYMOE_TILED_AMX_CODE), then
/// the CPU and OS (amx_cpu_reason, asked once per process).
inline const char* amx_unavailable_reason() noexcept {
#if POLYMOE_TILED_AMX_CODE
  return amx_cpu_reason();
#else
  return "this level has no AVX-512 / x86-64 Linux AMX code";
#endif
}

/// Whether a tiled_amx layer prepared now runs its tiles: always for an AMX-targeted build (an
/// error if the machine refuses), else when amx_unavailable_reason() is nullptr.
inline bool amx_enabled() {
  if constexpr (amx_target) {
    const char* why = amx_unavailable_reason();
    require(why == nullptr, "polymoe: this build targets AMX but ", why ? why : "");
    return true;
  } else {
    return amx_unavailable_reason() == nullptr;
  }
}

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_AMX_CPU
