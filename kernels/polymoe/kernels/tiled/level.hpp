#pragma once
// The instruction-set levels of the tiled kernels, and how a build gets them.
//
// A build that pins the instruction set (its compiler targets AVX-512: -march=native on such a
// machine, -march=sapphirerapids, ...; or POLYMOE_TILED_PORTABLE, or POLYMOE_TILED_NO_DISPATCH)
// compiles the kernels once, for that target, in `inline namespace native`: no run-time choice
// at all. Any other GCC x86-64 build (a plain -O2 consumer) compiles them once per level, each
// under its own `#pragma GCC target` in a namespace of its own, and a layer runs the best level
// this CPU has (chosen when it is prepared):
//
//   avx512_zen        as avx512_vnni_bf16, for AMD Zen 4 and later: bf16 GEMMs on vdpbf16ps (bf16
//                     pairs, which Zen issues at the FMA's rate) and Zen's instruction scheduling
//   avx512_vnni_bf16  AVX-512 F/CD/BW/DQ/VL with VNNI, BF16 and VBMI, and the AMX tiles where the
//                     machine runs them (Sapphire Rapids and later)
//   avx512            AVX-512 F/CD/BW/DQ/VL (Skylake-SP, Cascade Lake, Ice Lake): int8 without VNNI
//   portable          loops in the build's own target
//
// The kernel files under kernels/tiled (all but this one, level_macros.hpp, foreach_level.hpp,
// tuning.hpp, phases.hpp and isa.hpp) are therefore included once per level: instead of
// `#pragma once` each toggles a guard of its own against POLYMOE_TILED_TOGGLE, which
// foreach_level.hpp flips between levels, and wraps its namespace in POLYMOE_TILED_LEVEL_BEGIN /
// END. Their code tests the level's macros, never the compiler's ISA macros (GCC's C++ front end
// does not update those under a target pragma):
//
//   POLYMOE_TILED_AVX512    0/1  the AVX-512 micro-kernels
//   POLYMOE_TILED_ISA_VNNI  0/1  AVX-512 VNNI (vpdpbusd)
//   POLYMOE_TILED_ISA_BF16  0/1  AVX-512 BF16 (vcvtne2ps2bf16, vdpbf16ps)
//   POLYMOE_TILED_ISA_VBMI  0/1  AVX-512 VBMI (vpermb)
//   and those level_macros.hpp derives from them (AMX code, Zen, vdpbf16ps, tall tiles).
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>  // before any level's target pragma: the intrinsics set their own targets
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

// POLYMOE_TILED_DPBF16 / POLYMOE_TILED_TALL given on the command line: kept, as every level
// recomputes its own.
#if defined(POLYMOE_TILED_DPBF16)
#if POLYMOE_TILED_DPBF16
#define POLYMOE_TILED_DPBF16_GIVEN 1
#else
#define POLYMOE_TILED_DPBF16_GIVEN 0
#endif
#endif
#if defined(POLYMOE_TILED_TALL)
#if POLYMOE_TILED_TALL
#define POLYMOE_TILED_TALL_GIVEN 1
#else
#define POLYMOE_TILED_TALL_GIVEN 0
#endif
#endif

#if defined(__AVX512F__) || defined(POLYMOE_TILED_PORTABLE) || defined(POLYMOE_TILED_NO_DISPATCH) || \
    !defined(__x86_64__) || !defined(__GNUC__) || defined(__clang__)
#define POLYMOE_TILED_DISPATCH 0
#else
#define POLYMOE_TILED_DISPATCH 1
#endif

#if !POLYMOE_TILED_DISPATCH
// The one level: the build's own target.
#define POLYMOE_TILED_LEVEL native
#define POLYMOE_TILED_LEVEL_BEGIN inline namespace native {
#define POLYMOE_TILED_LEVEL_END }
#if defined(__AVX512F__) && !defined(POLYMOE_TILED_PORTABLE)
#define POLYMOE_TILED_AVX512 1
#else
#define POLYMOE_TILED_AVX512 0
#endif
#if POLYMOE_TILED_AVX512 && defined(__AVX512VNNI__)
#define POLYMOE_TILED_ISA_VNNI 1
#else
#define POLYMOE_TILED_ISA_VNNI 0
#endif
#if POLYMOE_TILED_AVX512 && defined(__AVX512BF16__)
#define POLYMOE_TILED_ISA_BF16 1
#else
#define POLYMOE_TILED_ISA_BF16 0
#endif
#if POLYMOE_TILED_AVX512 && defined(__AVX512VBMI__)
#define POLYMOE_TILED_ISA_VBMI 1
#else
#define POLYMOE_TILED_ISA_VBMI 0
#endif
#if defined(__znver3__) || defined(__znver4__) || defined(__znver5__)
#define POLYMOE_TILED_TARGET_ZEN 1
#else
#define POLYMOE_TILED_TARGET_ZEN 0
#endif
#include <polymoe/kernels/tiled/level_macros.hpp>
#endif

namespace polymoe::kernels::tiled {

/// The levels (see above); `native` is a pinned build's one level.
enum class isa_level { native, portable, avx512, avx512_vnni_bf16, avx512_zen };

/// Whether this build chooses the level at run time.
inline constexpr bool run_time_isa = POLYMOE_TILED_DISPATCH;

/// Whether a pinned build's one level runs AVX-512 code.
#if !POLYMOE_TILED_DISPATCH && POLYMOE_TILED_AVX512
inline constexpr bool native_avx512 = true;
#else
inline constexpr bool native_avx512 = false;
#endif

/// A level's instruction set in words ("AVX-512 with VNNI, BF16 and VBMI"; no parentheses, as
/// tools print it inside some).
[[nodiscard]] inline const char* level_words(isa_level l) noexcept {
  switch (l) {
    case isa_level::avx512_zen: return "AVX-512 with VNNI, BF16 and VBMI, for AMD Zen";
    case isa_level::avx512_vnni_bf16: return "AVX-512 with VNNI, BF16 and VBMI";
    case isa_level::avx512: return "AVX-512 without VNNI, BF16 or VBMI";
    case isa_level::portable: return "portable loops, no AVX-512";
    case isa_level::native: break;
  }
#if POLYMOE_TILED_DISPATCH
  return "the build's target";
#elif POLYMOE_TILED_AVX512
  return POLYMOE_TILED_ISA_VNNI && POLYMOE_TILED_ISA_BF16 && POLYMOE_TILED_ISA_VBMI
             ? "AVX-512 with VNNI, BF16 and VBMI, pinned by the build"
             : "AVX-512, pinned by the build";
#else
  return "portable loops, pinned by the build";
#endif
}

/// Whether this CPU (and its OS, which must save the AVX-512 state) runs level l's code.
[[nodiscard]] inline bool level_runs_here(isa_level l) noexcept {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (l) {
    case isa_level::native:
    case isa_level::portable: return true;
    case isa_level::avx512_zen:
      if (!__builtin_cpu_is("amd")) return false;
      [[fallthrough]];
    case isa_level::avx512_vnni_bf16:
      if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bf16") ||
          !__builtin_cpu_supports("avx512vbmi"))
        return false;
      [[fallthrough]];
    case isa_level::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
  }
  return false;
#else
  return l == isa_level::native || l == isa_level::portable;
#endif
}

/// Why the CPU or OS cannot run AMX tiles, or nullptr when they can: CPUID leaf 7 (amx-tile,
/// amx-bf16, amx-int8), the OS's XCR0 bits 17-18, and Linux's permission for the tile data
/// (arch_prctl ARCH_REQ_XCOMP_PERM), asked once per process.
[[nodiscard]] inline const char* amx_cpu_reason() noexcept {
#if defined(__x86_64__) && defined(__linux__)
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
  return "AMX tiles need x86-64 Linux";
#endif
}

}  // namespace polymoe::kernels::tiled
