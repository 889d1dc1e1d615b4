// polymoe_bench: the layers whose kernel is kernel::tbb_grouped (one kernel per translation unit).
#include "polymoe_bench_impl.hpp"

namespace polymoe::bench {
void bench_kernel_tbb_grouped(const sweep& s) { bench_kernel<kernel::tbb_grouped>(s); }
}  // namespace polymoe::bench
