// ko: kernel::tiled does not implement quant::mxfp4 (the ok twin uses bf16, which it does).
#include <polymoe/polymoe.hpp>
#ifdef POLYMOE_KO
using Quant = polymoe::quant::mxfp4;
#else
using Quant = polymoe::quant::bf16;
#endif
void use(const polymoe::MoeConfig& cfg, const polymoe::MoeWeights& w, const polymoe::Matrix& h, const polymoe::Matrix& l) {
  polymoe::MoeLayer<polymoe::a2a::local, Quant, polymoe::kernel::tiled> layer(cfg, w);
  (void)layer.forward(h, l);
}
