#pragma once
// Run-time selection of a layer: (a2a, quant, kernel) names -> a std::variant over the valid
// triples of a table. The variant is the only registry; an unknown name or an invalid pairing is a
// polymoe::error that lists the valid choices for that axis given the other two. The programs that
// choose a layer from names (the tool's --a2a/--quant/--kernel, the Python module's keywords) share
// this header and differ only in the labels their messages use.
#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>

#include <polymoe/core/error.hpp>

namespace polymoe::selection {

/// A valid triple as a value: T is mp_list<A2A, Quant, Kernel>.
template <class T>
struct triple_tag {
  using type = T;
  using a2a = boost::mp11::mp_at_c<T, 0>;
  using quant = boost::mp11::mp_at_c<T, 1>;
  using kernel = boost::mp11::mp_at_c<T, 2>;
};

/// One alternative per triple of `Triples` (a table's valid_triples_of), in its order.
template <class Triples>
using triple_variant = boost::mp11::mp_rename<boost::mp11::mp_transform<triple_tag, Triples>, std::variant>;

struct triple_names {
  std::string_view a2a, quant, kernel;
};

/// How a program names the axes in its messages: the tool says "--kernel", Python says "kernel=".
struct axis_labels {
  std::string_view a2a = "a2a", quant = "quant", kernel = "kernel";
  std::string_view hint;  ///< appended to an error, e.g. where every valid triple is listed
};

/// The names of every valid triple, in `Triples` order.
template <class Triples>
std::vector<triple_names> all_triple_names() {
  std::vector<triple_names> v;
  boost::mp11::mp_for_each<boost::mp11::mp_transform<triple_tag, Triples>>([&](auto t) {
    using T = decltype(t);
    v.push_back({T::a2a::name, T::quant::name, T::kernel::name});
  });
  return v;
}

/// The names of one axis of the valid triples (&triple_names::a2a, ::quant or ::kernel), each once,
/// in table order.
template <class Triples>
std::vector<std::string> axis_names(std::string_view triple_names::*axis) {
  std::vector<std::string> names;
  for (const auto& t : all_triple_names<Triples>())
    if (std::find(names.begin(), names.end(), t.*axis) == names.end()) names.emplace_back(t.*axis);
  return names;
}

/// "-" and "_" are the same in names given by a user.
inline std::string normalize_name(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c == '-') c = '_';
  return out;
}

/// kernel "auto": of the kernels that pair with (a2a, quant), the one of highest Kernel::speed that
/// is fast on this machine (Kernel::fast_here()); empty when none pairs.
template <class Triples>
std::string_view auto_kernel(std::string_view a2a_in, std::string_view quant_in) {
  const std::string a = normalize_name(a2a_in), q = normalize_name(quant_in);
  std::string_view best;
  int best_speed = -1;
  boost::mp11::mp_for_each<boost::mp11::mp_transform<triple_tag, Triples>>([&](auto t) {
    using T = decltype(t);
    using K = typename T::kernel;
    if (T::a2a::name != a || T::quant::name != q) return;
    int speed = 0;
    if constexpr (requires { K::speed; }) speed = K::speed;
    bool fast = true;
    if constexpr (requires { K::fast_here(); }) fast = K::fast_here();
    if (fast && speed > best_speed) best = K::name, best_speed = speed;
  });
  return best;
}

/// The variant alternative for the named triple; polymoe::error listing valid choices otherwise.
template <class Triples>
triple_variant<Triples> select_triple(std::string_view a2a_in, std::string_view quant_in, std::string_view kernel_in,
                                      const axis_labels& labels = {}) {
  using variant = triple_variant<Triples>;
  const std::string a = normalize_name(a2a_in), q = normalize_name(quant_in), k = normalize_name(kernel_in);
  const auto all = all_triple_names<Triples>();
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i].a2a == a && all[i].quant == q && all[i].kernel == k)
      return boost::mp11::mp_with_index<std::variant_size_v<variant>>(
          i, [](auto I) { return variant(std::in_place_index<decltype(I)::value>); });

  // which axis is at fault, and what would work on it given the other two
  struct axis {
    std::string_view label;
    const std::string* given;
    std::string_view triple_names::*field;
  };
  const std::array<axis, 3> axes{axis{labels.kernel, &k, &triple_names::kernel},
                                 axis{labels.quant, &q, &triple_names::quant}, axis{labels.a2a, &a, &triple_names::a2a}};
  auto known = [&](const axis& ax) {
    for (const auto& t : all)
      if (t.*ax.field == *ax.given) return true;
    return false;
  };
  auto list = [&](const axis& ax, bool given_others) {
    std::vector<std::string_view> names;
    for (const auto& t : all) {
      bool others = true;
      if (given_others)
        for (const auto& o : axes)
          if (&o != &ax && t.*o.field != *o.given) others = false;
      const auto n = t.*ax.field;
      if (others && std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
    std::string s;
    for (const auto n : names) {
      if (!s.empty()) s += ", ";
      s += n;
    }
    return s;
  };
  // the label's bare word ("--kernel" -> "kernel", "kernel=" -> "kernel") for "valid kernel names"
  auto word = [](std::string_view l) {
    while (!l.empty() && l.front() == '-') l.remove_prefix(1);
    while (!l.empty() && l.back() == '=') l.remove_suffix(1);
    return l;
  };
  for (const auto& ax : axes)
    if (!known(ax)) {
      std::string with = list(ax, true);
      throw error(detail::concat("unknown ", ax.label, " '", *ax.given, "'; valid ", word(ax.label),
                                 with.empty() ? " names: " + list(ax, false)
                                              : " names with the other two axes as given: " + with,
                                 labels.hint));
    }
  std::string msg = detail::concat("(a2a=", a, ", quant=", q, ", kernel=", k, ") is not a valid triple");
  for (const auto& ax : axes) {
    const std::string with = list(ax, true);
    if (!with.empty()) msg += detail::concat("; valid ", ax.label, " for the other two: ", with);
  }
  throw error(msg + std::string(labels.hint));
}

/// The names of the selected alternative.
template <class... T>
triple_names names_of(const std::variant<T...>& v) {
  return std::visit(
      [](auto t) {
        using Tag = decltype(t);
        return triple_names{Tag::a2a::name, Tag::quant::name, Tag::kernel::name};
      },
      v);
}

}  // namespace polymoe::selection
