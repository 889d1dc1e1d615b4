// Instantiates the layers of `polymoe run` for: fp32 bf16.
#include "run_layer_impl.hpp"

namespace polymoe::cli {
template void run_with_quant<quant::fp32>(const triple_variant&, run_context&);
template void run_with_quant<quant::bf16>(const triple_variant&, run_context&);
}  // namespace polymoe::cli
