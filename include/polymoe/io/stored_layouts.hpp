#pragma once
// The stored forms a checkpoint can hold: float weights, and the weights of every scheme of the
// pairing table that declares a checkpoint layout (quant::checkpoint_layout, next to the scheme).
// The loader (hf_checkpoint.hpp) reads and the tool's writer writes through these; a new scheme
// with a layout is stored and loaded with no line here.
//
//   polymoe::io::stored_scheme s = polymoe::io::stored_scheme::of<polymoe::quant::mxfp4::weights>();
//   polymoe::io::with_layout(s, [&]<class W>(boost::mp11::mp_identity<W>) { ... });
#include <string>
#include <string_view>
#include <tuple>
#include <variant>
#include <vector>

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>

#include <polymoe/core/error.hpp>
#include <polymoe/io/safetensors.hpp>
#include <polymoe/policies.hpp>

namespace polymoe::io {

namespace detail {
template <class Q>
using weights_of = typename Q::weights;
template <class W>
using has_layout = boost::mp11::mp_bool<quant::has_checkpoint_layout<W>>;
}  // namespace detail

/// The stored weights types with a checkpoint layout, once each, in the table's scheme order.
using stored_layouts = boost::mp11::mp_copy_if<
    boost::mp11::mp_unique<boost::mp11::mp_transform<detail::weights_of, pairing::quants_of<core_table>>>,
    detail::has_layout>;
inline constexpr int stored_layout_count = static_cast<int>(boost::mp11::mp_size<stored_layouts>::value);

/// An expert set as a checkpoint stores it: fp32 (float checkpoints) or one of stored_layouts.
using stored_experts = boost::mp11::mp_rename<boost::mp11::mp_push_front<stored_layouts, ExpertWeights>, std::variant>;
/// A layer's weights as a checkpoint stores them.
using stored_layer_weights = boost::mp11::mp_rename<
    boost::mp11::mp_push_front<boost::mp11::mp_transform<BasicMoeWeights, stored_layouts>, MoeWeights>, std::variant>;

/// Calls f(mp_identity<W>{}) for the layout W at `index` of stored_layouts.
template <class F>
decltype(auto) with_layout_at(int index, F&& f) {
  require(index >= 0 && index < stored_layout_count, "stored layout index ", index, " is out of range");
  return boost::mp11::mp_with_index<stored_layout_count>(static_cast<std::size_t>(index), [&](auto I) -> decltype(auto) {
    return f(boost::mp11::mp_identity<boost::mp11::mp_at_c<stored_layouts, decltype(I)::value>>{});
  });
}

/// How a layer's experts are stored: float weights, or the layout at `index` of stored_layouts.
struct stored_scheme {
  int index = -1;

  template <class W>
  [[nodiscard]] static constexpr stored_scheme of() noexcept {
    return {static_cast<int>(boost::mp11::mp_find<stored_layouts, W>::value)};
  }
  [[nodiscard]] static constexpr stored_scheme float_weights() noexcept { return {}; }
  [[nodiscard]] constexpr bool is_float() const noexcept { return index < 0; }
  /// "float", or the layout's name (fp8_block, mxfp4, ...).
  [[nodiscard]] std::string_view name() const {
    if (is_float()) return "float";
    return with_layout_at(index, []<class W>(boost::mp11::mp_identity<W>) { return quant::checkpoint_layout<W>::name; });
  }
  /// The stored form named `s`: a layout's name or alias, or the name of a scheme of the table
  /// whose weights it stores (mxfp4_w4a16 is stored as mxfp4); index -2 when none is.
  [[nodiscard]] static stored_scheme named(std::string_view s);
  friend constexpr bool operator==(stored_scheme, stored_scheme) = default;
};

[[nodiscard]] inline std::string_view to_string(stored_scheme s) { return s.name(); }

/// Calls f(name, form) for every name a stored form goes by, in this order: each layout's name and
/// alias, then each scheme of the table whose weights a layout stores (mxfp4_w4a16: mxfp4). A name
/// may come more than once (an alias equal to its name, a scheme named as its layout).
template <class F>
void for_each_stored_name(F&& f) {
  boost::mp11::mp_for_each<boost::mp11::mp_iota_c<stored_layout_count>>([&](auto I) {
    using L = quant::checkpoint_layout<boost::mp11::mp_at_c<stored_layouts, I>>;
    f(L::name, stored_scheme{static_cast<int>(I)});
    f(L::alias, stored_scheme{static_cast<int>(I)});
  });
  boost::mp11::mp_for_each<boost::mp11::mp_transform<boost::mp11::mp_identity, pairing::quants_of<core_table>>>(
      [&]<class Q>(boost::mp11::mp_identity<Q>) {
        if constexpr (quant::has_checkpoint_layout<typename Q::weights>)
          f(Q::name, stored_scheme::of<typename Q::weights>());
      });
}

inline stored_scheme stored_scheme::named(std::string_view s) {
  stored_scheme found{-2};
  for_each_stored_name([&](std::string_view n, stored_scheme form) {
    if (found.index < 0 && s == n) found = form;
  });
  return found;
}

/// Calls f(mp_identity<W>{}) for the layout of a quantized stored scheme.
template <class F>
decltype(auto) with_layout(stored_scheme s, F&& f) {
  require(!s.is_float(), "float weights have no quantized layout");
  return with_layout_at(s.index, std::forward<F>(f));
}

/// Calls f(tensor) for each tensor of layout W, in order.
template <class W, class F>
void for_each_stored_tensor(F&& f) {
  std::apply([&](const auto&... t) { (f(t), ...); }, quant::checkpoint_layout<W>::tensors);
}

/// The dtypes a stored element may have in a file (the first is the one polymoe writes).
[[nodiscard]] inline std::vector<dtype> dtypes_of(quant::element e) {
  switch (e) {
    case quant::element::f32_scale: return {dtype::F32};
    case quant::element::e4m3: return {dtype::F8_E4M3};
    case quant::element::e4m3_scale: return {dtype::F8_E4M3, dtype::U8};
    case quant::element::e8m0:
    case quant::element::u8: return {dtype::U8};
    case quant::element::i8: return {dtype::I8};
  }
  return {};
}

/// The shape of a projection's tensor t (N rows, K columns) in a per-expert file.
template <class T>
[[nodiscard]] std::vector<std::int64_t> stored_shape(const T& t, index_t N, index_t K) {
  if (t.scalar) return {};
  return {t.rows.of(N), t.cols.of(K)};
}
/// The shape of tensor t stacked over E experts (GPT-OSS): [E, N, ceil(K / group)] and the
/// per-group extent as a last dimension when it is more than one.
template <class T>
[[nodiscard]] std::vector<std::int64_t> stacked_shape(const T& t, index_t E, index_t N, index_t K) {
  const index_t groups = t.cols.group == 0 ? 1 : (K + t.cols.group - 1) / t.cols.group;
  std::vector<std::int64_t> s{E, t.rows.of(N), groups};
  if (t.cols.per_group > 1) s.push_back(t.cols.per_group);
  return s;
}

/// Every stored form, for messages: "float (F32, BF16, F16), fp8_block (.weight F8_E4M3 +
/// .weight_scale_inv F32), ...".
[[nodiscard]] inline std::string stored_forms_text() {
  std::string out = "float (.weight F32, BF16 or F16)";
  boost::mp11::mp_for_each<boost::mp11::mp_transform<boost::mp11::mp_identity, stored_layouts>>([&]<class W>(
                                                                                            boost::mp11::mp_identity<W>) {
    out += std::string(", ") + std::string(quant::checkpoint_layout<W>::name) + " (";
    bool first = true;
    for_each_stored_tensor<W>([&](const auto& t) {
      out += std::string(first ? "" : " + ") + std::string(t.suffix) + " " +
             std::string(dtype_name(dtypes_of(t.type).front()));
      first = false;
    });
    out += ")";
  });
  return out;
}

}  // namespace polymoe::io
