// Explicit instantiations of every local layer whose kernel is tbb_grouped (see layer_instances.hpp).
#define POLYMOE_DEFINE_LAYER_INSTANCES
#include "layer_instances.hpp"

#define POLYMOE_INSTANTIATE_IF_tbb_grouped(A, Q, K) POLYMOE_INSTANTIATE_##K(A, Q)
#define POLYMOE_INSTANTIATE_tbb_grouped(A, Q) template class POLYMOE_LAYER_IMPL(A, Q, tbb_grouped);
#define POLYMOE_INSTANTIATE_reference(A, Q)
#define POLYMOE_INSTANTIATE_tiled(A, Q)
#define POLYMOE_INSTANTIATE_tiled_amx(A, Q)
POLYMOE_LOCAL_TRIPLES(POLYMOE_INSTANTIATE_IF_tbb_grouped)
