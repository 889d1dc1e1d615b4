// Included first by every kernel file that is compiled once per instruction-set level
// (level.hpp). No include guard: it checks each inclusion.
#include <polymoe/kernels/tiled/level.hpp>
#if POLYMOE_TILED_DISPATCH && !defined(POLYMOE_TILED_IN_LEVEL)
#error "polymoe: this build chooses the tiled kernels' instruction set at run time, so their files are compiled once per level: include <polymoe/kernel/tiled.hpp> or <polymoe/kernel/tiled_amx.hpp> (or build for one target, e.g. -march=native)"
#endif
