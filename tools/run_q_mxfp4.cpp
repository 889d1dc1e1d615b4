// Instantiates the layers of `polymoe run` for: mxfp4.
#include "run_layer_impl.hpp"

namespace polymoe::cli {
template void run_with_quant<quant::mxfp4>(const triple_variant&, run_context&);
}  // namespace polymoe::cli
