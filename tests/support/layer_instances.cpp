// One part of polymoe_test_instances: the explicit instantiations of the layer slots I with
// I % POLYMOE_INSTANCE_PARTS == POLYMOE_INSTANCE_PART (tests/CMakeLists.txt compiles this file
// once per part, so the parts build in parallel).
#define POLYMOE_DEFINE_LAYER_INSTANCES
#include "layer_instances.hpp"

#if !defined(POLYMOE_INSTANCE_PART) || !defined(POLYMOE_INSTANCE_PARTS)
#error "compile with -DPOLYMOE_INSTANCE_PART=p -DPOLYMOE_INSTANCE_PARTS=n"
#endif

#define POLYMOE_INSTANTIATE_SLOT(I) template class POLYMOE_LAYER_SLOT(I);
#define POLYMOE_SKIP_SLOT(I)
#define POLYMOE_DEFINE_LAYER_SLOT(z, I, data)                                                         \
  BOOST_PP_IF(BOOST_PP_EQUAL(BOOST_PP_MOD(I, POLYMOE_INSTANCE_PARTS), POLYMOE_INSTANCE_PART),        \
              POLYMOE_INSTANTIATE_SLOT, POLYMOE_SKIP_SLOT)(I)
BOOST_PP_REPEAT(POLYMOE_LAYER_SLOTS, POLYMOE_DEFINE_LAYER_SLOT, ~)
