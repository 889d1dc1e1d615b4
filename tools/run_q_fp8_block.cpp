// Instantiates the layers of `polymoe run` for: fp8_block fp8_block_weight_only.
#include "run_layer_impl.hpp"

namespace polymoe::cli {
template void run_with_quant<quant::fp8_block>(const triple_variant&, run_context&);
template void run_with_quant<quant::fp8_block_weight_only>(const triple_variant&, run_context&);
}  // namespace polymoe::cli
