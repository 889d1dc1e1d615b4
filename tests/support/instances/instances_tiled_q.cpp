// Explicit instantiations of the local layers whose kernel is tiled, int8 and 4-bit schemes, and tiled_amx's
// other schemes
// (see layer_instances.hpp; the tiled layers are split over two files to share the compile time).
#define POLYMOE_DEFINE_LAYER_INSTANCES
#include "layer_instances.hpp"

#define POLYMOE_INSTANTIATE_IF_tiled(A, Q, K) POLYMOE_INSTANTIATE_##K(A, Q)
#define POLYMOE_INSTANTIATE_tiled(A, Q) POLYMOE_TILED_##Q(A)
#define POLYMOE_INSTANTIATE_reference(A, Q)
#define POLYMOE_INSTANTIATE_tbb_grouped(A, Q)
#define POLYMOE_INSTANTIATE_tiled_amx(A, Q) POLYMOE_AMX_##Q(A)
#define POLYMOE_AMX_fp32(A)
#define POLYMOE_AMX_bf16(A) template class POLYMOE_LAYER_IMPL(A, bf16, tiled_amx);
#define POLYMOE_AMX_fp8(A)
#define POLYMOE_AMX_fp8_block(A)
#define POLYMOE_AMX_fp8_block_weight_only(A)
#define POLYMOE_AMX_int8_w8a8(A) template class POLYMOE_LAYER_IMPL(A, int8_w8a8, tiled_amx);
#define POLYMOE_AMX_mxfp4(A) template class POLYMOE_LAYER_IMPL(A, mxfp4, tiled_amx);
#define POLYMOE_AMX_nvfp4(A) template class POLYMOE_LAYER_IMPL(A, nvfp4, tiled_amx);
#define POLYMOE_AMX_mxfp4_w4a16(A)
#define POLYMOE_AMX_nvfp4_w4a16(A)
#define POLYMOE_AMX_nvfp4_w4a4(A) template class POLYMOE_LAYER_IMPL(A, nvfp4_w4a4, tiled_amx);
#define POLYMOE_TILED_fp32(A)
#define POLYMOE_TILED_bf16(A)
#define POLYMOE_TILED_fp8(A)
#define POLYMOE_TILED_fp8_block(A)
#define POLYMOE_TILED_fp8_block_weight_only(A)
#define POLYMOE_TILED_int8_w8a8(A) template class POLYMOE_LAYER_IMPL(A, int8_w8a8, tiled);
#define POLYMOE_TILED_mxfp4(A) template class POLYMOE_LAYER_IMPL(A, mxfp4, tiled);
#define POLYMOE_TILED_nvfp4(A) template class POLYMOE_LAYER_IMPL(A, nvfp4, tiled);
#define POLYMOE_TILED_mxfp4_w4a16(A)
#define POLYMOE_TILED_nvfp4_w4a16(A)
#define POLYMOE_TILED_nvfp4_w4a4(A)
POLYMOE_LOCAL_TRIPLES(POLYMOE_INSTANTIATE_IF_tiled)
