#pragma once
#include <string_view>

#include <polymoe/core/roles.hpp>
#include <polymoe/kernels/reference_experts.hpp>

namespace polymoe::kernel {

/// Plain loops over the scheme's dequantized weights: the oracle every other kernel is compared
/// with. Runs the standard and the masked formats natively and implements every quant scheme.
struct reference {
  using kernel_concept = kernel_tag;
  static constexpr std::string_view name = "reference";
  static constexpr int speed = 0;  ///< rank among the kernels (--kernel auto): the oracle, not fast

  /// The reference runs the scheme's stored form as it is (no re-layout).
  template <class Q>
  using prepared = typename Q::weights;

  template <class Q>
  static prepared<Q> prepare(typename Q::weights w) {
    return w;
  }
  template <class Q>
  void run(const DispatchOutput<format::standard>& d, const prepared<Q>& w, const ExpertMlp& mlp,
           CombineInput<format::standard> c) const {
    kernels::reference_standard<Q>(d, w, mlp, c.out);
  }
  template <class Q>
  void run(const DispatchOutput<format::masked>& d, const prepared<Q>& w, const ExpertMlp& mlp,
           CombineInput<format::masked> c) const {
    kernels::reference_masked<Q>(d, w, mlp, c.out);
  }
};

}  // namespace polymoe::kernel
