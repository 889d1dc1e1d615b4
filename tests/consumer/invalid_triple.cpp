// Must not compile: toy::loop_kernel's rows do not give it quant::fp32, so this triple of the
// extended table is the one compile error naming the axis at fault.
#include "toy_policies.hpp"

void use(const polymoe::MoeConfig& cfg, const polymoe::MoeWeights& w, const polymoe::Matrix& h, const polymoe::Matrix& l) {
  toy::layer<polymoe::a2a::local, polymoe::quant::fp32, toy::loop_kernel> layer(cfg, w);
  (void)layer.forward(h, l);
}
