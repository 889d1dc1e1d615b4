// polymoe_bench: the layers whose kernel is kernel::tiled_amx (one kernel per translation unit).
#include "polymoe_bench_impl.hpp"

namespace polymoe::bench {
void bench_kernel_tiled_amx(const sweep& s) { bench_kernel<kernel::tiled_amx>(s); }
}  // namespace polymoe::bench
