// AMX tile micro-kernels for kernel::tiled_amx: bf16 (tdpbf16ps) and int8 W8A8 (tdpbusd).
//
// ISA choice. A build whose compiler targets AMX (__AMX_TILE__, __AMX_BF16__ and __AMX_INT8__
// defined, e.g. -march=sapphirerapids, or POLYMOE_AMX=ON) uses the tiles unconditionally: there is
// no run-time test, only Linux's permission request, and a machine that refuses it is an error at
// prepare. Any other x86-64 build detects AMX at prepare time (CPUID leaf 7: amx-tile, amx-bf16,
// amx-int8; XCR0 bits 17-18 enabled by the OS; arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)) and
// falls back to the AVX-512 micro-kernels when any of them is missing. The tile code itself is
// compiled for every AVX-512 level on x86-64 Linux (function target attributes; level.hpp), so CI
// keeps compiling it.
//
// Tiles: one configuration for both types, eight tiles of 16 rows x 64 bytes. C tiles are 16 rows
// x 16 columns of fp32 / int32; a row block (up to 256 rows, amx_block_rows) runs in pairs of row
// groups of 16 (2 x 2 register blocking: block22); the weights of a panel are walked in slabs of
// 32 KiB (8 k-blocks x 4 column tiles of 1 KiB), so every row pair after the first reads them
// from L1.
//
//   bf16 weights, AMX layout: per panel [K32/32][4 column tiles][16 k-pairs][16 columns][2] — the
//     B operand of tdpbf16ps, 1 KiB a tile, K padded to a multiple of 32 with zeros. Rows of A are
//     bf16, K32 long, one buffer for the whole batch in sorted-row order.
//   int8 weights: the tile layout of int8.hpp, per panel [K64/64][4 column tiles][16 quads][16
//     columns][4] — the B operand of tdpbusd, 1 KiB a tile, as bf16's. Rows of A are u8, K64 long.
//
// Few rows per block (decode) do not fill a tile: below its threshold (amx_min_rows_bf16 /
// amx_min_rows_int8, or tuning::amx_min_rows) a block runs an AVX-512 FMA loop over the same AMX
// layout (bf16) or the VNNI kernel over the int8 tile layout. The thresholds were measured
// (docs/decisions.md#amx-min-rows).
//
// The pieces: amx_cpu.hpp (whether AMX runs here), amx_layout.hpp (the weight layout),
// amx_tiles.hpp (configuration and tile operations), amx_loops.hpp (the tile loops), amx_fma.hpp
// (the AVX-512 loops over the same layout).
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_AMX) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_AMX
#undef POLYMOE_TILED_GUARD_AMX
#else
#define POLYMOE_TILED_GUARD_AMX
#endif
#include <polymoe/kernels/tiled/amx_cpu.hpp>
#include <polymoe/kernels/tiled/amx_fma.hpp>
#include <polymoe/kernels/tiled/amx_layout.hpp>
#include <polymoe/kernels/tiled/amx_loops.hpp>
#include <polymoe/kernels/tiled/amx_tiles.hpp>
#endif  // POLYMOE_TILED_GUARD_AMX
