// ko: a kernel that opts into the role but has no kernel_row.
#include <polymoe/polymoe.hpp>
struct my_kernel : polymoe::kernel::reference {
  static constexpr std::string_view name = "mine";
};
#ifdef POLYMOE_KO
using Kernel = my_kernel;
#else
using Kernel = polymoe::kernel::reference;
#endif
void use(const polymoe::MoeConfig& cfg, const polymoe::MoeWeights& w, const polymoe::Matrix& h, const polymoe::Matrix& l) {
  polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::fp32, Kernel> layer(cfg, w);
  (void)layer.forward(h, l);
}
