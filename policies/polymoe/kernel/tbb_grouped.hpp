#pragma once
#include <string_view>

#include <polymoe/core/roles.hpp>
#include <polymoe/kernels/grouped_gemm.hpp>

namespace polymoe::kernel {

/// Groups tokens by expert and runs each (expert, row chunk) GEMM pair with Eigen, all chunks of
/// all experts in one oneTBB loop. Weights are dequantized to fp32 once, at prepare; activations
/// are rounded as the scheme says. Runs the standard format natively.
struct tbb_grouped {
  using kernel_concept = kernel_tag;
  static constexpr std::string_view name = "tbb_grouped";
  static constexpr int speed = 1;  ///< rank among the kernels (--kernel auto)

  template <class Q>
  using prepared = kernels::DenseExperts;

  template <class Q>
  static prepared<Q> prepare(typename Q::weights w) {
    return kernels::dequantize_experts<Q>(w);
  }
  template <class Q>
  void run(const DispatchOutput<format::standard>& d, const prepared<Q>& w, const ExpertMlp& mlp,
           CombineInput<format::standard> c) const {
    kernels::grouped_standard<Q>(d, w, mlp, c.out);
  }
};

}  // namespace polymoe::kernel
