// ko: a type that opts into the dispatcher role but has no line in the pairing table.
#include <polymoe/polymoe.hpp>
struct my_dispatcher : polymoe::a2a::local {
  static constexpr std::string_view name = "mine";
};
#ifdef POLYMOE_KO
using A2A = my_dispatcher;
#else
using A2A = polymoe::a2a::local;
#endif
void use(const polymoe::MoeConfig& cfg, const polymoe::MoeWeights& w, const polymoe::Matrix& h, const polymoe::Matrix& l) {
  polymoe::MoeLayer<A2A, polymoe::quant::fp32, polymoe::kernel::reference> layer(cfg, w);
  (void)layer.forward(h, l);
}
