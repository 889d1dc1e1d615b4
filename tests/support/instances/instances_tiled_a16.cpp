// Explicit instantiations of the local layers of the W4A16 schemes (mxfp4_w4a16, nvfp4_w4a16) on
// kernel::tiled and kernel::tiled_amx (see layer_instances.hpp; a file of their own to share the
// compile time).
#define POLYMOE_DEFINE_LAYER_INSTANCES
#include "layer_instances.hpp"

#define POLYMOE_INSTANTIATE_IF_tiled(A, Q, K) POLYMOE_INSTANTIATE_##K(A, Q)
#define POLYMOE_INSTANTIATE_tiled(A, Q) POLYMOE_A16_##Q(A, tiled)
#define POLYMOE_INSTANTIATE_reference(A, Q)
#define POLYMOE_INSTANTIATE_tbb_grouped(A, Q)
#define POLYMOE_INSTANTIATE_tiled_amx(A, Q) POLYMOE_A16_##Q(A, tiled_amx)
#define POLYMOE_A16_fp32(A, K)
#define POLYMOE_A16_bf16(A, K)
#define POLYMOE_A16_fp8(A, K)
#define POLYMOE_A16_fp8_block(A, K)
#define POLYMOE_A16_fp8_block_weight_only(A, K)
#define POLYMOE_A16_int8_w8a8(A, K)
#define POLYMOE_A16_mxfp4(A, K)
#define POLYMOE_A16_nvfp4(A, K)
#define POLYMOE_A16_nvfp4_w4a4(A, K)
#define POLYMOE_A16_mxfp4_w4a16(A, K) template class POLYMOE_LAYER_IMPL(A, mxfp4_w4a16, K);
#define POLYMOE_A16_nvfp4_w4a16(A, K) template class POLYMOE_LAYER_IMPL(A, nvfp4_w4a16, K);
POLYMOE_LOCAL_TRIPLES(POLYMOE_INSTANTIATE_IF_tiled)
