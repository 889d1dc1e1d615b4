// The tiled kernels' macros that follow from a level's (level.hpp): included once per level, by
// level.hpp for a pinned build and by foreach_level.hpp for each level of a run-time choice.
// No include guard: each inclusion redefines them for the level about to be compiled.
#undef POLYMOE_TILED_AMX_CODE
#undef POLYMOE_TILED_ZEN
#undef POLYMOE_TILED_DPBF16
#undef POLYMOE_TILED_TALL

// The AMX tile code (function target attributes over the level's AVX-512): x86-64 Linux.
#if POLYMOE_TILED_AVX512 && defined(__x86_64__) && defined(__linux__)
#define POLYMOE_TILED_AMX_CODE 1
#else
#define POLYMOE_TILED_AMX_CODE 0
#endif

// Whether the target is an AMD Zen core (GCC 12 calls Zen 4 znver3, with AVX-512): the choices of
// POLYMOE_TILED_DPBF16 and POLYMOE_TILED_TALL follow it (a run-time choice: the avx512_zen level).
#define POLYMOE_TILED_ZEN POLYMOE_TILED_TARGET_ZEN

// Whether bf16 GEMMs without AMX run vdpbf16ps (bf16 pairs, two products per lane) instead of
// widening the weights and running fp32 FMAs: a compile-time choice by the target. On AMD Zen 4
// vdpbf16ps issues at the FMA's rate, so it has twice the flops; on Intel cores it ran at a
// quarter of the FMA's instruction rate, so there the FMAs stay (docs/decisions.md#bf16-instruction).
// kernel::tiled's bf16 then runs the bf16-row pipeline of kernel::tiled_amx without tiles.
// -DPOLYMOE_TILED_DPBF16=0/1 overrides (a run-time choice applies 1 to the levels with BF16).
#if defined(POLYMOE_TILED_DPBF16_GIVEN)
#if POLYMOE_TILED_DPBF16_GIVEN && !(POLYMOE_TILED_AVX512 && POLYMOE_TILED_ISA_BF16) && !POLYMOE_TILED_DISPATCH
#error "polymoe: POLYMOE_TILED_DPBF16=1 needs AVX-512 BF16 in the target (e.g. -mavx512bf16)"
#endif
#define POLYMOE_TILED_DPBF16 (POLYMOE_TILED_DPBF16_GIVEN && POLYMOE_TILED_AVX512 && POLYMOE_TILED_ISA_BF16)
#else
#define POLYMOE_TILED_DPBF16 (POLYMOE_TILED_AVX512 && POLYMOE_TILED_ISA_BF16 && POLYMOE_TILED_ZEN)
#endif

// Whether bf16 blocks of more than max_tile_rows rows run tall tiles (panel_products.hpp).
// -DPOLYMOE_TILED_TALL=0/1 overrides.
#if defined(POLYMOE_TILED_TALL_GIVEN)
#define POLYMOE_TILED_TALL POLYMOE_TILED_TALL_GIVEN
#else
#define POLYMOE_TILED_TALL (!POLYMOE_TILED_ZEN)
#endif
