// ko: a kernel that computes in CUDA memory, paired with a dispatcher that carries host memory only
// (an extended table, as a GPU component's would be): one error naming both spaces and the
// dispatchers that carry the kernel's. Needs no CUDA compiler: the table alone decides.
#include <boost/mp11/list.hpp>

#include <polymoe/polymoe.hpp>

struct device_kernel {
  using kernel_concept = polymoe::kernel_tag;
  using memory_space = polymoe::space::cuda;
  static constexpr std::string_view name = "device_kernel";
};
struct host_only : polymoe::a2a::local {
  using memory_spaces = boost::mp11::mp_list<polymoe::space::host>;
  static constexpr std::string_view name = "host_only";
};
struct gpu_table
    : polymoe::pairing::extend<polymoe::core_table, polymoe::pairing::dispatcher_row<host_only>,
                               polymoe::pairing::kernel_row<device_kernel, polymoe::pairing::natives<polymoe::format::standard>,
                                                            polymoe::pairing::schemes<polymoe::quant::fp32>>> {};
// a2a::local carries CUDA memory: the same kernel pairs with it
static_assert(polymoe::can_make_layer_in<gpu_table, polymoe::a2a::local, polymoe::quant::fp32, device_kernel>);
#ifdef POLYMOE_KO
using Kernel = device_kernel;
#else
using Kernel = polymoe::kernel::reference;
#endif
void use(const polymoe::MoeConfig& cfg, const polymoe::MoeWeights& w, const polymoe::Matrix& h, const polymoe::Matrix& l) {
  polymoe::basic_moe_layer<gpu_table, host_only, polymoe::quant::fp32, Kernel> layer(cfg, w);
  (void)layer.forward(h, l);
}
