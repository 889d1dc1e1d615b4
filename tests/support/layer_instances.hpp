#pragma once
// Compile once, link everywhere: every valid triple of the core table is explicitly instantiated
// in polymoe_test_instances (support/layer_instances.cpp, compiled once per part) and declared
// extern here, so the test translation units that iterate polymoe::valid_triples do not each
// compile every kernel again.
//
// The list is polymoe::valid_triples itself: slot I names the I-th valid triple's layer type, and
// slots past the end name an empty stand-in (a distinct harmless type per slot), so a fixed
// number of slots covers a table of any size up to POLYMOE_LAYER_SLOTS.
#include <cstddef>

#include <boost/mp11/algorithm.hpp>
#include <boost/preprocessor/arithmetic/mod.hpp>
#include <boost/preprocessor/comparison/equal.hpp>
#include <boost/preprocessor/control/if.hpp>
#include <boost/preprocessor/repetition/repeat.hpp>

#include <polymoe/polymoe.hpp>

#define POLYMOE_LAYER_SLOTS 96

namespace polymoe::test::instances {
namespace mp = boost::mp11;

template <std::size_t I>
struct unused_slot {};  ///< complete, no static_assert: what an unused slot's "diagnostic" is

template <std::size_t I, bool Used = (I < mp::mp_size<valid_triples>::value)>
struct slot {
  using triple = mp::mp_at_c<valid_triples, I>;
  using a2a = mp::mp_at_c<triple, 0>;
  using quant = mp::mp_at_c<triple, 1>;
  using kernel = mp::mp_at_c<triple, 2>;
  using resolution = pairing::resolve<core_table, a2a, quant, kernel>;
};
template <std::size_t I>
struct slot<I, false> {
  using a2a = unused_slot<I>;
  using quant = unused_slot<I>;
  using kernel = unused_slot<I>;
  using resolution = pairing::failure<unused_slot<I>>;
};

static_assert(mp::mp_size<valid_triples>::value <= POLYMOE_LAYER_SLOTS,
              "polymoe tests: more valid triples than POLYMOE_LAYER_SLOTS (tests/support/layer_instances.hpp); raise it");
}  // namespace polymoe::test::instances

#define POLYMOE_LAYER_SLOT(I)                                                                        \
  polymoe::detail::moe_layer_impl<                                                                   \
      polymoe::test::instances::slot<I>::a2a, polymoe::test::instances::slot<I>::quant,              \
      polymoe::test::instances::slot<I>::kernel, polymoe::test::instances::slot<I>::resolution>

#if !defined(POLYMOE_DEFINE_LAYER_INSTANCES) && !defined(POLYMOE_NO_LAYER_INSTANCES)
#define POLYMOE_EXTERN_LAYER_SLOT(z, I, data) extern template class POLYMOE_LAYER_SLOT(I);
BOOST_PP_REPEAT(POLYMOE_LAYER_SLOTS, POLYMOE_EXTERN_LAYER_SLOT, ~)
#undef POLYMOE_EXTERN_LAYER_SLOT
#endif
