// Instantiates the layers of `polymoe run` for: nvfp4 nvfp4_w4a4.
#include "run_layer_impl.hpp"

namespace polymoe::cli {
template void run_with_quant<quant::nvfp4>(const triple_variant&, run_context&);
template void run_with_quant<quant::nvfp4_w4a4>(const triple_variant&, run_context&);
}  // namespace polymoe::cli
