// polymoe_bench: the layers whose kernel is kernel::tiled (one kernel per translation unit).
#include "polymoe_bench_impl.hpp"

namespace polymoe::bench {
void bench_kernel_tiled(const sweep& s) { bench_kernel<kernel::tiled>(s); }
}  // namespace polymoe::bench
