// ko: kernel::tiled_amx runs bf16, the fp8 schemes, int8_w8a8 and the 4-bit schemes on its
// tiles; quant::fp32 is not in its row of the pairing table (the ok twin uses int8_w8a8, which it runs).
#include <polymoe/polymoe.hpp>
#ifdef POLYMOE_KO
using Quant = polymoe::quant::fp32;
#else
using Quant = polymoe::quant::int8_w8a8;
#endif
void use(const polymoe::MoeConfig& cfg, const polymoe::MoeWeights& w, const polymoe::Matrix& h, const polymoe::Matrix& l) {
  polymoe::MoeLayer<polymoe::a2a::local, Quant, polymoe::kernel::tiled_amx> layer(cfg, w);
  (void)layer.forward(h, l);
}
