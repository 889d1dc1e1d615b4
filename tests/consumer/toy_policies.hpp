#pragma once
// A user's own quant scheme and expert kernel, and a table that extends polymoe's core table with
// them: nothing in polymoe is edited, the installed headers are used as they are.
#include <cmath>
#include <span>
#include <string_view>
#include <vector>

#include <polymoe/polymoe.hpp>

namespace toy {

/// Weights rounded to multiples of 1/16 (stored as fp32), activations as they are.
struct grid16 {
  using quant_concept = polymoe::quant_tag;
  static constexpr std::string_view name = "grid16";

  using weights = polymoe::quant::fp32::weights;

  static weights quantize(const polymoe::ExpertWeights& f) {
    weights w = polymoe::quant::fp32::quantize(f);
    for (polymoe::Matrix* m : {&w.w13, &w.w2}) m->array() = (m->array() * 16.0f).round() / 16.0f;
    return w;
  }
  static void dequantize(const weights& w, polymoe::index_t e, polymoe::MatrixRef w13, polymoe::MatrixRef w2) {
    polymoe::quant::fp32::dequantize(w, e, w13, w2);
  }
  static void quantize_activation(std::span<float>) noexcept {}
};

/// One token and one slot at a time, on the scheme's dequantized weights; runs the standard format.
struct loop_kernel {
  using kernel_concept = polymoe::kernel_tag;
  static constexpr std::string_view name = "loop";

  template <class Q>
  using prepared = typename Q::weights;
  template <class Q>
  static prepared<Q> prepare(typename Q::weights w) {
    return w;
  }

  template <class Q>
  void run(const polymoe::DispatchOutput<polymoe::format::standard>& d, const prepared<Q>& w,
           const polymoe::ExpertMlp& mlp, polymoe::CombineInput<polymoe::format::standard> c) const {
    using polymoe::index_t;
    const polymoe::ExpertShape s = w.shape();
    polymoe::Matrix w13(s.rows13(), s.hidden), w2(s.hidden, s.intermediate);
    std::vector<float> x(static_cast<std::size_t>(s.hidden)), pre(static_cast<std::size_t>(s.rows13())),
        h(static_cast<std::size_t>(s.intermediate));
    c.out.setZero();
    for (index_t t = 0; t < d.hidden.rows(); ++t)
      for (index_t j = 0; j < d.ids.cols(); ++j) {
        const index_t e = d.ids(t, j);
        if (e < 0) continue;
        Q::dequantize(w, e, w13, w2);
        float scale = d.weights(t, j);
        for (index_t i = 0; i < s.hidden; ++i) x[i] = d.hidden(t, i) * (mlp.weight_on_input ? scale : 1.0f);
        if (mlp.weight_on_input) scale = 1.0f;
        Q::quantize_activation(x);
        const float* b13 = w.b13_of(e);
        const float* b2 = w.b2_of(e);
        for (index_t r = 0; r < s.rows13(); ++r) {
          double acc = b13 ? b13[r] : 0.0;
          for (index_t i = 0; i < s.hidden; ++i) acc += double{w13(r, i)} * x[i];
          pre[r] = static_cast<float>(acc);
        }
        polymoe::apply_activation(mlp.activation, pre.data(), h.data(), s.intermediate);
        Q::quantize_activation(h);
        for (index_t r = 0; r < s.hidden; ++r) {
          double acc = b2 ? b2[r] : 0.0;
          for (index_t i = 0; i < s.intermediate; ++i) acc += double{w2(r, i)} * h[i];
          c.out(t, r) += scale * static_cast<float>(acc);
        }
      }
  }
};

/// polymoe's core table with one more scheme (which the generic kernels also run) and one more
/// kernel (which runs bf16 and the new scheme).
struct table : polymoe::pairing::extend<polymoe::core_table,
                                        polymoe::pairing::scheme_row<grid16, polymoe::pairing::on<loop_kernel>>,
                                        polymoe::pairing::kernel_row<loop_kernel, polymoe::pairing::natives<polymoe::format::standard>,
                                                                     polymoe::pairing::schemes<polymoe::quant::bf16>>> {};

template <class A2A, class Quant, class Kernel>
using layer = polymoe::basic_moe_layer<table, A2A, Quant, Kernel>;

}  // namespace toy
