// Compiles the file POLYMOE_TILED_LEVEL_INCLUDE names once per instruction-set level (level.hpp):
// in a pinned build once, as it is; in a build that chooses at run time once per level, each
// under its level's `#pragma GCC target` in namespace polymoe::...::<level>. No include guard:
// include it once per program text, after defining POLYMOE_TILED_LEVEL_INCLUDE (only one such
// root may exist, as the guards of the files it reaches toggle together).
#include <polymoe/kernels/tiled/level.hpp>

#ifndef POLYMOE_TILED_LEVEL_INCLUDE
#error "polymoe: define POLYMOE_TILED_LEVEL_INCLUDE before including foreach_level.hpp"
#endif

#if !POLYMOE_TILED_DISPATCH
#include POLYMOE_TILED_LEVEL_INCLUDE
#else
#define POLYMOE_TILED_IN_LEVEL 1
// GCC 12 reports false "may be used uninitialized" inside its AVX-512 intrinsics under a target
// pragma, and notes that __m512 arguments change the ABI (none crosses a level's boundary).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"
#define POLYMOE_TILED_TARGET_ZEN 0
#define POLYMOE_TILED_LEVEL_END }

// Level 1: portable, the build's own target. Every header the kernels include from outside
// kernels/tiled is included here first, so that no other level's target reaches its code.
#define POLYMOE_TILED_LEVEL portable
#define POLYMOE_TILED_LEVEL_BEGIN namespace portable {
#define POLYMOE_TILED_AVX512 0
#define POLYMOE_TILED_ISA_VNNI 0
#define POLYMOE_TILED_ISA_BF16 0
#define POLYMOE_TILED_ISA_VBMI 0
#include <polymoe/kernels/tiled/level_macros.hpp>
#include POLYMOE_TILED_LEVEL_INCLUDE
#define POLYMOE_TILED_TOGGLE

// Level 2: AVX-512 F/CD/BW/DQ/VL.
#undef POLYMOE_TILED_LEVEL
#undef POLYMOE_TILED_LEVEL_BEGIN
#undef POLYMOE_TILED_AVX512
#define POLYMOE_TILED_LEVEL avx512
#define POLYMOE_TILED_LEVEL_BEGIN namespace avx512 {
#define POLYMOE_TILED_AVX512 1
#include <polymoe/kernels/tiled/level_macros.hpp>
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt,avx512f,avx512cd,avx512bw,avx512dq,avx512vl")
#include POLYMOE_TILED_LEVEL_INCLUDE
#pragma GCC pop_options
#undef POLYMOE_TILED_TOGGLE

// Level 3: AVX-512 with VNNI, BF16 and VBMI (and the AMX tiles where the machine runs them).
#undef POLYMOE_TILED_LEVEL
#undef POLYMOE_TILED_LEVEL_BEGIN
#undef POLYMOE_TILED_ISA_VNNI
#undef POLYMOE_TILED_ISA_BF16
#undef POLYMOE_TILED_ISA_VBMI
#define POLYMOE_TILED_LEVEL avx512_vnni_bf16
#define POLYMOE_TILED_LEVEL_BEGIN namespace avx512_vnni_bf16 {
#define POLYMOE_TILED_ISA_VNNI 1
#define POLYMOE_TILED_ISA_BF16 1
#define POLYMOE_TILED_ISA_VBMI 1
#include <polymoe/kernels/tiled/level_macros.hpp>
#pragma GCC push_options
#pragma GCC target( \
    "avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt,avx512f,avx512cd,avx512bw,avx512dq,avx512vl,avx512vnni,avx512bf16,avx512vbmi")
#include POLYMOE_TILED_LEVEL_INCLUDE
#pragma GCC pop_options
#define POLYMOE_TILED_TOGGLE

// Level 4: level 3's instructions on AMD Zen: bf16 pairs on vdpbf16ps, no tall tiles, Zen 4's
// scheduling (GCC 12 calls Zen 4 znver3).
#undef POLYMOE_TILED_LEVEL
#undef POLYMOE_TILED_LEVEL_BEGIN
#undef POLYMOE_TILED_TARGET_ZEN
#define POLYMOE_TILED_LEVEL avx512_zen
#define POLYMOE_TILED_LEVEL_BEGIN namespace avx512_zen {
#define POLYMOE_TILED_TARGET_ZEN 1
#include <polymoe/kernels/tiled/level_macros.hpp>
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt,avx512f,avx512cd,avx512bw,avx512dq,avx512vl,avx512vnni," \
                   "avx512bf16,avx512vbmi,tune=znver3")
#include POLYMOE_TILED_LEVEL_INCLUDE
#pragma GCC pop_options
#pragma GCC diagnostic pop
#undef POLYMOE_TILED_IN_LEVEL
// No level's macros outside the levels (the guards' toggle state stays as it is).
#undef POLYMOE_TILED_LEVEL
#undef POLYMOE_TILED_LEVEL_BEGIN
#undef POLYMOE_TILED_LEVEL_END
#undef POLYMOE_TILED_AVX512
#undef POLYMOE_TILED_ISA_VNNI
#undef POLYMOE_TILED_ISA_BF16
#undef POLYMOE_TILED_ISA_VBMI
#undef POLYMOE_TILED_TARGET_ZEN
#undef POLYMOE_TILED_AMX_CODE
#undef POLYMOE_TILED_ZEN
#undef POLYMOE_TILED_DPBF16
#undef POLYMOE_TILED_TALL
#endif
