// ko: an int in the A2A slot.
#include <polymoe/polymoe.hpp>
#ifdef POLYMOE_KO
using A2A = int;
#else
using A2A = polymoe::a2a::local;
#endif
void use(const polymoe::MoeConfig& cfg, const polymoe::MoeWeights& w, const polymoe::Matrix& h, const polymoe::Matrix& l) {
  polymoe::MoeLayer<A2A, polymoe::quant::fp32, polymoe::kernel::reference> layer(cfg, w);
  polymoe::Matrix out = layer.forward(h, l);
  (void)out;
}
