// ko: kernel::tiled does not implement quant::nvfp4_w4a4 (the ok twin uses nvfp4, which it does).
#include <polymoe/polymoe.hpp>
#ifdef POLYMOE_KO
using Quant = polymoe::quant::nvfp4_w4a4;
#else
using Quant = polymoe::quant::nvfp4;
#endif
void use(const polymoe::MoeConfig& cfg, const polymoe::MoeWeights& w, const polymoe::Matrix& h, const polymoe::Matrix& l) {
  polymoe::MoeLayer<polymoe::a2a::local, Quant, polymoe::kernel::tiled> layer(cfg, w);
  (void)layer.forward(h, l);
}
