// Explicit instantiations of the local layers whose kernel is tiled, float, bf16, fp8 and NVFP4 W4A4
// schemes, and tiled_amx's fp8 schemes
// (see layer_instances.hpp; the tiled layers are split over two files to share the compile time).
#define POLYMOE_DEFINE_LAYER_INSTANCES
#include "layer_instances.hpp"

#define POLYMOE_INSTANTIATE_IF_tiled(A, Q, K) POLYMOE_INSTANTIATE_##K(A, Q)
#define POLYMOE_INSTANTIATE_tiled(A, Q) POLYMOE_TILED_##Q(A)
#define POLYMOE_INSTANTIATE_reference(A, Q)
#define POLYMOE_INSTANTIATE_tbb_grouped(A, Q)
#define POLYMOE_INSTANTIATE_tiled_amx(A, Q) POLYMOE_AMX_##Q(A)
#define POLYMOE_AMX_fp32(A)
#define POLYMOE_AMX_bf16(A)
#define POLYMOE_AMX_fp8(A) template class POLYMOE_LAYER_IMPL(A, fp8, tiled_amx);
#define POLYMOE_AMX_fp8_block(A) template class POLYMOE_LAYER_IMPL(A, fp8_block, tiled_amx);
#define POLYMOE_AMX_fp8_block_weight_only(A) template class POLYMOE_LAYER_IMPL(A, fp8_block_weight_only, tiled_amx);
#define POLYMOE_AMX_int8_w8a8(A)
#define POLYMOE_AMX_mxfp4(A)
#define POLYMOE_AMX_nvfp4(A)
#define POLYMOE_AMX_mxfp4_w4a16(A)
#define POLYMOE_AMX_nvfp4_w4a16(A)
#define POLYMOE_AMX_nvfp4_w4a4(A)
#define POLYMOE_TILED_fp32(A) template class POLYMOE_LAYER_IMPL(A, fp32, tiled);
#define POLYMOE_TILED_bf16(A) template class POLYMOE_LAYER_IMPL(A, bf16, tiled);
#define POLYMOE_TILED_fp8(A) template class POLYMOE_LAYER_IMPL(A, fp8, tiled);
#define POLYMOE_TILED_fp8_block(A) template class POLYMOE_LAYER_IMPL(A, fp8_block, tiled);
#define POLYMOE_TILED_fp8_block_weight_only(A) template class POLYMOE_LAYER_IMPL(A, fp8_block_weight_only, tiled);
#define POLYMOE_TILED_int8_w8a8(A)
#define POLYMOE_TILED_mxfp4(A)
#define POLYMOE_TILED_nvfp4(A)
#define POLYMOE_TILED_mxfp4_w4a16(A)
#define POLYMOE_TILED_nvfp4_w4a16(A)
#define POLYMOE_TILED_nvfp4_w4a4(A) template class POLYMOE_LAYER_IMPL(A, nvfp4_w4a4, tiled);
POLYMOE_LOCAL_TRIPLES(POLYMOE_INSTANTIATE_IF_tiled)
