#pragma once
// Whether AMX runs here: a build that targets it (amx_target), or the run-time test (CPUID, the
// OS's XCR0 bits, Linux's permission request for the tile data), and from how many rows per block
// the tiles pay (the measured thresholds of bf16 and int8).
#include <cstdint>

#include <polymoe/core/error.hpp>
#include <polymoe/core/types.hpp>
#include <polymoe/kernels/tiled/microkernel.hpp>

#if defined(POLYMOE_TILED_AVX512) && defined(__x86_64__) && defined(__linux__)
#define POLYMOE_TILED_AMX_CODE 1
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace polymoe::kernels::tiled {

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AMX_INT8__) && defined(POLYMOE_TILED_AMX_CODE)
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

/// Why AMX cannot run here, or nullptr when it can (the answer is computed once per process; the
/// permission request is part of it).
inline const char* amx_unavailable_reason() noexcept {
#if defined(POLYMOE_TILED_AMX_CODE)
  static const char* const reason = []() -> const char* {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return "CPUID leaf 7 is missing";
    if (!((d >> 24) & 1u) || !((d >> 22) & 1u) || !((d >> 25) & 1u))
      return "the CPU lacks amx-tile, amx-bf16 or amx-int8";
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1u)) return "the OS has not enabled XSAVE";
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if (((lo >> 17) & 3u) != 3u) return "the OS has not enabled the tile state (XCR0 bits 17-18)";
    constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    if (syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) != 0)
      return "Linux refused the tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM)";
    return nullptr;
  }();
  return reason;
#else
  return "this build has no AVX-512 / x86-64 Linux AMX code";
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

}  // namespace polymoe::kernels::tiled
