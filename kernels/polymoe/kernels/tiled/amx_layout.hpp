// The bf16 AMX weight layout: per panel [K32/32][4 column tiles][16 k-pairs][16 columns][2], the B
// operand of tdpbf16ps, and the row stride of tile operands.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_AMX_LAYOUT) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_AMX_LAYOUT
#undef POLYMOE_TILED_GUARD_AMX_LAYOUT
#else
#define POLYMOE_TILED_GUARD_AMX_LAYOUT
#endif
#include <cstdint>

#include <polymoe/core/types.hpp>
#include <polymoe/kernels/tiled/prepack.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

/// Elements of a bf16 AMX k-block and tile.
inline constexpr index_t amx_kb = 32;
inline constexpr index_t amx_tile_elems = 512;  ///< 16 k-pairs x 16 columns x 2

[[nodiscard]] constexpr index_t padded_k32(index_t K) noexcept { return (K + amx_kb - 1) / amx_kb * amx_kb; }

/// Row stride, in bytes, for a tile operand whose rows are `row_bytes` long (a multiple of 64): an
/// odd number of cache lines, so that the 16 rows of one tile load fall in 16 different L1 sets.
/// (Rows of 4 KiB, H = 2048 in bf16, put all 16 in one set of a 12-way L1.)
[[nodiscard]] constexpr index_t amx_row_stride_bytes(index_t row_bytes) noexcept {
  return (row_bytes / 64) % 2 == 1 ? row_bytes : row_bytes + 64;
}

/// Where weight (k, column c) of a panel lives in the bf16 AMX layout.
[[nodiscard]] constexpr index_t amx_bf16_slot(index_t k, index_t c) noexcept {
  return ((k / amx_kb) * 4 + c / 16) * amx_tile_elems + ((k % amx_kb) / 2) * 32 + (c % 16) * 2 + k % 2;
}

/// The bf16 AMX layout as a PackedExperts layout.
struct amx_layout {
  [[nodiscard]] static constexpr index_t rows(index_t K) noexcept { return padded_k32(K); }
  template <class W>
  [[nodiscard]] static constexpr index_t slot(index_t k, index_t c) noexcept {
    return amx_bf16_slot(k, c);
  }
};
using AmxBf16Experts = PackedExperts<std::uint16_t, amx_layout>;

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_AMX_LAYOUT
