// ko: kernel::tiled_amx does not implement quant::fp32 (AMX has no fp32 tiles; the ok twin runs fp32
// on kernel::tiled, which does).
#include <polymoe/polymoe.hpp>
#ifdef POLYMOE_KO
using Kernel = polymoe::kernel::tiled_amx;
#else
using Kernel = polymoe::kernel::tiled;
#endif
void use(const polymoe::MoeConfig& cfg, const polymoe::MoeWeights& w, const polymoe::Matrix& h, const polymoe::Matrix& l) {
  polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::fp32, Kernel> layer(cfg, w);
  (void)layer.forward(h, l);
}
