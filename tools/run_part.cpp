// One part of the layers of `polymoe run` (tools/CMakeLists.txt compiles this file once per part,
// with POLYMOE_CLI_PART set; run_layer.hpp says which triples a part holds).
#include "run_layer_impl.hpp"

namespace polymoe::cli {
template void run_part<POLYMOE_CLI_PART>(const triple_variant&, run_context&);
}  // namespace polymoe::cli
