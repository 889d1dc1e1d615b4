// Instantiates the layers of `polymoe run` whose quant scheme is quant::nvfp4_w4a16 (one scheme per file: the
// layers of one scheme over every dispatcher and kernel are this translation unit's whole cost).
#include "run_layer_impl.hpp"

namespace polymoe::cli {
template void run_with_quant<quant::nvfp4_w4a16>(const triple_variant&, run_context&);
}  // namespace polymoe::cli
