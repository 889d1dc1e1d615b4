// One part of polymoe_bench's layers (bench/CMakeLists.txt compiles this file once per part): the
// bench_kernel<K> of the core table's kernels whose index is POLYMOE_BENCH_PART modulo
// POLYMOE_BENCH_PARTS. Slots past the table's kernels name a stand-in that benches nothing.
#include <cstddef>

#include <boost/preprocessor/arithmetic/mod.hpp>
#include <boost/preprocessor/comparison/equal.hpp>
#include <boost/preprocessor/control/if.hpp>
#include <boost/preprocessor/repetition/repeat.hpp>

#include "polymoe_bench_impl.hpp"

#define POLYMOE_BENCH_KERNEL_SLOTS 16

namespace polymoe::bench {
template <std::size_t I>
struct no_kernel {};
template <std::size_t I>
using kernel_slot = boost::mp11::mp_eval_if_c<(I >= boost::mp11::mp_size<pairing::kernels_of<core_table>>::value),
                                              no_kernel<I>, boost::mp11::mp_at, pairing::kernels_of<core_table>, boost::mp11::mp_size_t<I>>;
static_assert(boost::mp11::mp_size<pairing::kernels_of<core_table>>::value <= POLYMOE_BENCH_KERNEL_SLOTS,
              "polymoe_bench: more kernels than POLYMOE_BENCH_KERNEL_SLOTS (bench/polymoe_bench_part.cpp)");

#define POLYMOE_BENCH_INSTANTIATE(I) template void bench_kernel<kernel_slot<I>>(const sweep&);
#define POLYMOE_BENCH_SKIP(I)
#define POLYMOE_BENCH_SLOT(z, I, data)                                                               \
  BOOST_PP_IF(BOOST_PP_EQUAL(BOOST_PP_MOD(I, POLYMOE_BENCH_PARTS), POLYMOE_BENCH_PART),             \
              POLYMOE_BENCH_INSTANTIATE, POLYMOE_BENCH_SKIP)(I)
BOOST_PP_REPEAT(POLYMOE_BENCH_KERNEL_SLOTS, POLYMOE_BENCH_SLOT, ~)
}  // namespace polymoe::bench
