#pragma once
// Compile once, link everywhere: every local triple of the pairing table is explicitly instantiated
// in tests/support/instances/*.cpp (the polymoe_test_instances library), and declared extern here,
// so the test translation units that iterate polymoe::valid_triples do not each compile every
// kernel again. A triple missing from this list still works (it is then instantiated implicitly);
// the static_assert below keeps the list complete so that never costs compile time unnoticed.
#include <polymoe/polymoe.hpp>

// X(dispatcher, scheme, kernel) for every valid triple of the local dispatcher.
#define POLYMOE_LOCAL_TRIPLES(X)                                                                     \
  X(local, fp32, reference) X(local, bf16, reference) X(local, fp8, reference)                     \
  X(local, fp8_block, reference) X(local, fp8_block_weight_only, reference)                        \
  X(local, int8_w8a8, reference) X(local, mxfp4, reference) X(local, nvfp4, reference)             \
  X(local, nvfp4_w4a4, reference) X(local, mxfp4_w4a16, reference) X(local, nvfp4_w4a16, reference) \
  X(local, fp32, tbb_grouped) X(local, bf16, tbb_grouped) X(local, fp8, tbb_grouped)               \
  X(local, fp8_block, tbb_grouped) X(local, fp8_block_weight_only, tbb_grouped)                    \
  X(local, int8_w8a8, tbb_grouped) X(local, mxfp4, tbb_grouped) X(local, nvfp4, tbb_grouped)       \
  X(local, nvfp4_w4a4, tbb_grouped) X(local, mxfp4_w4a16, tbb_grouped)                            \
  X(local, nvfp4_w4a16, tbb_grouped)                                                               \
  X(local, fp32, tiled) X(local, bf16, tiled) X(local, fp8, tiled) X(local, fp8_block, tiled)        \
  X(local, fp8_block_weight_only, tiled) X(local, int8_w8a8, tiled) X(local, mxfp4, tiled)          \
  X(local, nvfp4, tiled) X(local, nvfp4_w4a4, tiled) X(local, bf16, tiled_amx)                      \
  X(local, int8_w8a8, tiled_amx) X(local, mxfp4, tiled_amx) X(local, fp8, tiled_amx)                 \
  X(local, fp8_block, tiled_amx) X(local, fp8_block_weight_only, tiled_amx) X(local, nvfp4, tiled_amx) \
  X(local, nvfp4_w4a4, tiled_amx) X(local, mxfp4_w4a16, tiled) X(local, nvfp4_w4a16, tiled)          \
  X(local, mxfp4_w4a16, tiled_amx) X(local, nvfp4_w4a16, tiled_amx)

#define POLYMOE_LAYER_IMPL(A, Q, K)                                                                  \
  polymoe::detail::moe_layer_impl<polymoe::a2a::A, polymoe::quant::Q, polymoe::kernel::K,          \
                                  polymoe::pairing::resolve<polymoe::a2a::A, polymoe::quant::Q, polymoe::kernel::K>>
#define POLYMOE_EXTERN_LAYER(A, Q, K) extern template class POLYMOE_LAYER_IMPL(A, Q, K);
#define POLYMOE_COUNT_LAYER(A, Q, K) +1

#if !defined(POLYMOE_DEFINE_LAYER_INSTANCES) && !defined(POLYMOE_NO_LAYER_INSTANCES)
POLYMOE_LOCAL_TRIPLES(POLYMOE_EXTERN_LAYER)
#endif

namespace polymoe::test {
template <class Triple>
using is_local_triple = std::is_same<boost::mp11::mp_front<Triple>, a2a::local>;
static_assert(boost::mp11::mp_count_if<valid_triples, is_local_triple>::value == 0 POLYMOE_LOCAL_TRIPLES(POLYMOE_COUNT_LAYER),
              "polymoe tests: tests/support/layer_instances.hpp must list every valid local triple");
}  // namespace polymoe::test
