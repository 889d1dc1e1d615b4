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
#include <tuple>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <polymoe/core/error.hpp>
#include <polymoe/quant/store.hpp>
#include <polymoe/quantize/fp8.hpp>

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

/// What one element of a stored tensor is, and so its checkpoint dtypes and the values refused at load.
enum class element : std::uint8_t {
  f32_scale,   ///< F32, finite and not negative
  e4m3,        ///< F8_E4M3 codes, no NaN code
  e4m3_scale,  ///< E4M3 codes stored as F8_E4M3 or U8, no NaN code
  e8m0,        ///< U8 E8M0 exponents, no NaN code (0xFF)
  u8,          ///< U8 bytes of packed codes, any value
  i8,          ///< I8 codes, any value
};

/// A stored extent for a projection extent n: ceil(n / group) · per_group (group 0: per_group).
struct extent {
  index_t group = 1, per_group = 1;
  [[nodiscard]] constexpr index_t of(index_t n) const noexcept {
    return group == 0 ? per_group : (n + group - 1) / group * per_group;
  }
};

/// One tensor of a scheme's checkpoint layout, per projection (gate [I, H], up [I, H], down [H, I])
/// of N rows and K columns: the name's suffix after the projection (".weight_scale_inv"), the
/// suffix after the stacked name in a stacked family (GPT-OSS "_blocks"; empty: the layout has no
/// stacked form), the element, and the shape {rows.of(N), cols.of(K)}, or a scalar that gate and
/// up share. Field13 and Field2 are the store's members it fills: gate's values then up's in
/// Field13 and down's in Field2, expert after expert (a scalar: one value per expert each).
template <auto Field13, auto Field2>
struct stored_tensor {
  std::string_view suffix, stacked;
  element type;
  extent rows{}, cols{};
  bool scalar = false;
  static constexpr auto field13 = Field13;
  static constexpr auto field2 = Field2;
};

/// How checkpoints store the weights W of a scheme, declared next to the scheme (a specialisation
/// with `name`, `alias`, `scheme` (the scheme a layer of these weights runs unless told otherwise),
/// `quantization_config` (config.json's, as JSON text) and `tensors`, a tuple of stored_tensor);
/// the checkpoint loader reads it and the tool's writer writes it. Weights without one are not
/// stored in checkpoints.
template <class W>
struct checkpoint_layout;

template <class W>
concept has_checkpoint_layout = requires { checkpoint_layout<W>::tensors; };

namespace detail {

/// polymoe::error naming `name` and the index of the first value that `type` refuses.
template <class T>
void require_elements(element type, std::span<T> v, std::string_view what, std::string_view name) {
  using V = std::remove_const_t<T>;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<V, float>) {
      require(std::isfinite(v[i]) && v[i] >= 0.0f, what, ": ", name, "[", i, "] = ", v[i],
              " is not a finite, non-negative scale");
    } else if constexpr (std::is_same_v<V, std::uint8_t>) {
      if (type == element::e4m3 || type == element::e4m3_scale)
        require(!polymoe::quantize::is_e4m3_nan(v[i]), what, ": ", name, " element ", i, " is an E4M3 NaN code");
      else if (type == element::e8m0)
        require(v[i] != 0xFF, what, ": ", name, " element ", i, " is the E8M0 NaN code 0xFF");
    }
  }
}

/// polymoe::error unless every fp32 scale is finite and not negative.
inline void require_scales(std::span<const float> s, std::string_view what, std::string_view name) {
  require_elements(element::f32_scale, s, what, name);
}

/// For weights that hold codes and fp32 scales per projection as w13, w13_scale, w2, w2_scale
/// (int8_w8a8, int4_w4a8): the stored tensors (shapes already checked) copied in, a negative or
/// non-finite scale refused.
template <class W, class C>
void copy_codes_and_scales(W& w, std::string_view what, const tensor_view<C>& w13, const tensor_view<float>& w13_scale,
                           const tensor_view<C>& w2, const tensor_view<float>& w2_scale) {
  require_scales(w13_scale.data, what, "w13_scale");
  require_scales(w2_scale.data, what, "w2_scale");
  w.w13 = copy_of(w13), w.w13_scale = copy_of(w13_scale);
  w.w2 = copy_of(w2), w.w2_scale = copy_of(w2_scale);
}

/// Such weights quantized from fp32: f validated, its biases carried over, each projection's
/// matrix given to encode(matrix, codes, scales).
template <class W, class Encode>
W quantize_codes_and_scales(const ExpertWeights& f, std::string_view what, Encode encode) {
  f.validate(what);
  W w{};
  static_cast<ExpertStore&>(w) = ExpertStore::from(f);
  encode(f.w13, w.w13, w.w13_scale);
  encode(f.w2, w.w2, w.w2_scale);
  return w;
}

}  // namespace detail

/// Which order the gate/up rows of a stored w13 are in.
enum class gate_up_order {
  stacked,      ///< rows [0, I) gate, [I, 2I) up: polymoe's canonical order
  interleaved,  ///< GPT-OSS: row 2j gate, row 2j+1 up (re-laid to stacked at load)
};

}  // namespace polymoe::quant
