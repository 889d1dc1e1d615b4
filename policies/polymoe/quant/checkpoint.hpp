#pragma once
// What the quant schemes' checkpoint factories take: a stored tensor as it is (a view of its
// elements and its shape), and the shape checks they share. Each factory validates every tensor
// against the ExpertShape before touching it and never requantizes.
//
//   auto f = polymoe::io::safetensors_file::open("model.safetensors");
//   polymoe::quant::tensor_view<std::uint8_t> blocks{bytes_as_u8(f.bytes(name)), f.info(name).shape};
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <polymoe/core/error.hpp>
#include <polymoe/quant/store.hpp>

namespace polymoe::quant {

/// A stored tensor: row-major elements and the shape they were stored with.
template <class T>
struct tensor_view {
  std::span<const T> data;
  std::vector<std::int64_t> shape;
};

namespace detail {

inline std::string shape_text(std::span<const std::int64_t> s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

/// polymoe::error unless `t` has exactly the shape `want` and as many elements as it says.
template <class T>
void require_shape(const tensor_view<T>& t, std::string_view what, std::string_view name,
                   std::initializer_list<std::int64_t> want) {
  const std::vector<std::int64_t> w(want);
  require(t.shape == w, what, ": ", name, " has shape ", shape_text(t.shape), ", expected ", shape_text(w));
  std::int64_t n = 1;
  for (const auto d : w) n *= d;
  require(static_cast<std::int64_t>(t.data.size()) == n, what, ": ", name, " holds ", t.data.size(),
          " elements, its shape ", shape_text(w), " needs ", n);
}

/// polymoe::error unless every fp32 scale is finite and not negative.
inline void require_scales(std::span<const float> s, std::string_view what, std::string_view name) {
  for (std::size_t i = 0; i < s.size(); ++i)
    require(std::isfinite(s[i]) && s[i] >= 0.0f, what, ": ", name, "[", i, "] = ", s[i],
            " is not a finite, non-negative scale");
}

/// The store's shape and biases, checked: b13 [E, rows13] and b2 [E, H] when shape.bias, else empty.
inline ExpertStore checked_store(const ExpertShape& s, std::string_view what, Matrix b13, Matrix b2) {
  check_biases(s, what, b13, b2);
  return ExpertStore{s, std::move(b13), std::move(b2)};
}

template <class T>
std::vector<T> copy_of(const tensor_view<T>& t) {
  return std::vector<T>(t.data.begin(), t.data.end());
}

}  // namespace detail

/// Which order the gate/up rows of a stored w13 are in.
enum class gate_up_order {
  stacked,      ///< rows [0, I) gate, [I, 2I) up: polymoe's canonical order
  interleaved,  ///< GPT-OSS: row 2j gate, row 2j+1 up (re-laid to stacked at load)
};

}  // namespace polymoe::quant
