// ko: a dispatcher in the Kernel slot.
#include <polymoe/polymoe.hpp>
#ifdef POLYMOE_KO
using Kernel = polymoe::a2a::local;
#else
using Kernel = polymoe::kernel::reference;
#endif
void use(const polymoe::MoeConfig& cfg, const polymoe::MoeWeights& w, const polymoe::Matrix& h, const polymoe::Matrix& l) {
  polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::fp32, Kernel> layer(cfg, w);
  (void)layer.forward(h, l);
}
