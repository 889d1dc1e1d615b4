// ko: a scheme that opts into the role but has no scheme_row in the core table.
#include <polymoe/polymoe.hpp>
struct my_scheme : polymoe::quant::fp32 {
  static constexpr std::string_view name = "mine";
};
#ifdef POLYMOE_KO
using Quant = my_scheme;
#else
using Quant = polymoe::quant::fp32;
#endif
void use(const polymoe::MoeConfig& cfg, const polymoe::MoeWeights& w, const polymoe::Matrix& h, const polymoe::Matrix& l) {
  polymoe::MoeLayer<polymoe::a2a::local, Quant, polymoe::kernel::reference> layer(cfg, w);
  (void)layer.forward(h, l);
}
