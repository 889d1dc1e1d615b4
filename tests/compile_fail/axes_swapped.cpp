// ko: the quant scheme and the dispatcher in each other's slot.
#include <polymoe/polymoe.hpp>
#ifdef POLYMOE_KO
using Layer = polymoe::MoeLayer<polymoe::quant::bf16, polymoe::a2a::local, polymoe::kernel::tbb_grouped>;
#else
using Layer = polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::bf16, polymoe::kernel::tbb_grouped>;
#endif
void use(const polymoe::MoeConfig& cfg, const polymoe::MoeWeights& w, const polymoe::Matrix& h, const polymoe::Matrix& l) {
  Layer layer(cfg, w);
  (void)layer.forward(h, l);
}
