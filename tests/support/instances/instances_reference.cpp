// Explicit instantiations of every local layer whose kernel is reference (see layer_instances.hpp).
#define POLYMOE_DEFINE_LAYER_INSTANCES
#include "layer_instances.hpp"

#define POLYMOE_INSTANTIATE_IF_reference(A, Q, K) POLYMOE_INSTANTIATE_##K(A, Q)
#define POLYMOE_INSTANTIATE_reference(A, Q) template class POLYMOE_LAYER_IMPL(A, Q, reference);
#define POLYMOE_INSTANTIATE_tbb_grouped(A, Q)
#define POLYMOE_INSTANTIATE_tiled_amx(A, Q)
#define POLYMOE_INSTANTIATE_tiled(A, Q)
POLYMOE_LOCAL_TRIPLES(POLYMOE_INSTANTIATE_IF_reference)
