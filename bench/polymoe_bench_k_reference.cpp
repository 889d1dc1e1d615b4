// polymoe_bench: the layers whose kernel is kernel::reference (one kernel per translation unit).
#include "polymoe_bench_impl.hpp"

namespace polymoe::bench {
void bench_kernel_reference(const sweep& s) { bench_kernel<kernel::reference>(s); }
}  // namespace polymoe::bench
