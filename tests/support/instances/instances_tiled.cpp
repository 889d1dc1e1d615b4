// Explicit instantiations of every local layer whose kernel is tiled (see layer_instances.hpp).
#define POLYMOE_DEFINE_LAYER_INSTANCES
#include "layer_instances.hpp"

#define POLYMOE_INSTANTIATE_IF_tiled(A, Q, K) POLYMOE_INSTANTIATE_##K(A, Q)
#define POLYMOE_INSTANTIATE_tiled(A, Q) template class POLYMOE_LAYER_IMPL(A, Q, tiled);
#define POLYMOE_INSTANTIATE_reference(A, Q)
#define POLYMOE_INSTANTIATE_tbb_grouped(A, Q)
POLYMOE_LOCAL_TRIPLES(POLYMOE_INSTANTIATE_IF_tiled)
