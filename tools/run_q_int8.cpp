// Instantiates the layers of `polymoe run` for: int8_w8a8.
#include "run_layer_impl.hpp"

namespace polymoe::cli {
template void run_with_quant<quant::int8_w8a8>(const triple_variant&, run_context&);
}  // namespace polymoe::cli
