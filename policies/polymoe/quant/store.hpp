#pragma once
// What every quant scheme's weight store shares: its shape and fp32 biases (no scheme quantizes
// biases). Schemes derive their `weights` from ExpertStore and add the quantized matrices.
#include <cstddef>
#include <initializer_list>
#include <string_view>

#include <polymoe/core/expert_weights.hpp>
#include <polymoe/kernels/parallel.hpp>

namespace polymoe::quant {

/// body(i) for every i in [0, n), in parallel, `grain` at a time: the encoders' loops over rows or
/// experts, each of which reads and writes its own values only (the same bytes as a loop in order).
template <class Body>
void for_each_part(index_t n, index_t grain, const Body& body) {
  kernels::parallel_for(tbb::blocked_range<index_t>(0, n, grain), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t i = r.begin(); i != r.end(); ++i) body(i);
  });
}

struct ExpertStore {
  ExpertShape shape_;
  Matrix b13;  ///< [E, rows13] or empty
  Matrix b2;   ///< [E, H] or empty

  [[nodiscard]] ExpertShape shape() const noexcept { return shape_; }
  [[nodiscard]] const float* b13_of(index_t e) const noexcept { return shape_.bias ? b13.row(e).data() : nullptr; }
  [[nodiscard]] const float* b2_of(index_t e) const noexcept { return shape_.bias ? b2.row(e).data() : nullptr; }

  static ExpertStore from(const ExpertWeights& f) { return ExpertStore{f.shape, f.b13, f.b2}; }

  /// One array of a store: its name, its size and the size its shape implies.
  struct sized {
    const char* name;
    std::size_t size, want;
  };
  /// Throws polymoe::error unless the biases match shape_ and every array has the size shape_
  /// implies: a store built by hand (its fields are public) is checked before a kernel indexes it.
  void check_sizes(std::string_view what, std::initializer_list<sized> arrays) const {
    check_biases(shape_, what, b13, b2);
    for (const sized& a : arrays)
      require(a.size == a.want, what, ": ", a.name, " holds ", a.size, " values, the shape ", shape_, " implies ",
              a.want);
  }
  /// Elements of a [experts, rows, cols] stack, as a size.
  [[nodiscard]] std::size_t count(index_t rows, index_t cols) const noexcept {
    return static_cast<std::size_t>(shape_.experts) * static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  }
};

}  // namespace polymoe::quant
