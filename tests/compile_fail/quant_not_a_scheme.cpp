// ko: a float in the Quant slot.
#include <polymoe/polymoe.hpp>
#ifdef POLYMOE_KO
using Quant = float;
#else
using Quant = polymoe::quant::fp32;
#endif
void use(const polymoe::MoeConfig& cfg, const polymoe::MoeWeights& w, const polymoe::Matrix& h, const polymoe::Matrix& l) {
  polymoe::MoeLayer<polymoe::a2a::local, Quant, polymoe::kernel::reference> layer(cfg, w);
  (void)layer.forward(h, l);
}
