#pragma once
// Run-time selection of a layer: (a2a, quant, kernel) names -> a std::variant over the valid
// triples of the tool's table (the core table, with the MPI component the MPI table, and with the
// CUDA component kernel::cuda's row added). The
// variant is the only registry; an unknown name or an invalid pairing is a polymoe::error that
// lists the valid choices for that axis given the other two.
#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>

#include <polymoe/polymoe.hpp>
#if defined(POLYMOE_WITH_MPI)
#include <polymoe/mpi.hpp>
#endif
#if defined(POLYMOE_WITH_CUDA)
#include <polymoe/cuda_table.hpp>
#endif

namespace polymoe::cli {

/// The table the tool selects from: the program links the MPI component or it does not, and the
/// CUDA component or it does not (its layers take the host-memory conveniences: copies each way).
#if defined(POLYMOE_WITH_MPI)
using tool_base_table = mpi_table;
#else
using tool_base_table = core_table;
#endif
#if defined(POLYMOE_WITH_CUDA)
struct tool_table : pairing::extend<tool_base_table, table_rows::cuda_kernel> {};
#else
using tool_table = tool_base_table;
#endif
using tool_triples = pairing::valid_triples_of<tool_table>;

/// The layer type of a triple of the tool's table.
template <class A2A, class Quant, class Kernel>
using tool_layer = basic_moe_layer<tool_table, A2A, Quant, Kernel>;

/// A valid triple as a value: T is mp_list<A2A, Quant, Kernel>.
template <class T>
struct triple_tag {
  using type = T;
  using a2a = boost::mp11::mp_at_c<T, 0>;
  using quant = boost::mp11::mp_at_c<T, 1>;
  using kernel = boost::mp11::mp_at_c<T, 2>;
};

using triple_variant = boost::mp11::mp_rename<boost::mp11::mp_transform<triple_tag, tool_triples>, std::variant>;

struct triple_names {
  std::string_view a2a, quant, kernel;
};

/// The names of every valid triple, in tool_triples order.
inline std::vector<triple_names> all_triple_names() {
  std::vector<triple_names> v;
  boost::mp11::mp_for_each<boost::mp11::mp_transform<triple_tag, tool_triples>>([&](auto t) {
    using T = decltype(t);
    v.push_back({T::a2a::name, T::quant::name, T::kernel::name});
  });
  return v;
}

/// The names of one axis of the valid triples (&triple_names::a2a, ::quant or ::kernel), each once,
/// in table order: the choices of the command lines' --a2a, --quant and --kernel.
inline std::vector<std::string> axis_names(std::string_view triple_names::*axis) {
  std::vector<std::string> names;
  for (const auto& t : all_triple_names())
    if (std::find(names.begin(), names.end(), t.*axis) == names.end()) names.emplace_back(t.*axis);
  return names;
}

/// "-" and "_" are the same in names given on the command line.
inline std::string normalize_name(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c == '-') c = '_';
  return out;
}

/// `--kernel auto`: of the kernels that pair with (a2a, quant) in the tool's table, the one of
/// highest Kernel::speed that is fast on this machine (Kernel::fast_here()); empty when none pairs.
inline std::string_view auto_kernel(std::string_view a2a_in, std::string_view quant_in) {
  const std::string a = normalize_name(a2a_in), q = normalize_name(quant_in);
  std::string_view best;
  int best_speed = -1;
  boost::mp11::mp_for_each<boost::mp11::mp_transform<triple_tag, tool_triples>>([&](auto t) {
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
inline triple_variant select_triple(std::string_view a2a_in, std::string_view quant_in, std::string_view kernel_in) {
  const std::string a = normalize_name(a2a_in), q = normalize_name(quant_in), k = normalize_name(kernel_in);
  const auto all = all_triple_names();
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i].a2a == a && all[i].quant == q && all[i].kernel == k)
      return boost::mp11::mp_with_index<std::variant_size_v<triple_variant>>(
          i, [](auto I) { return triple_variant(std::in_place_index<decltype(I)::value>); });

  // which axis is at fault, and what would work on it given the other two
  struct axis {
    const char* option;
    const std::string* given;
    std::string_view triple_names::*field;
  };
  const std::array<axis, 3> axes{axis{"--kernel", &k, &triple_names::kernel}, axis{"--quant", &q, &triple_names::quant},
                                 axis{"--a2a", &a, &triple_names::a2a}};
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
  for (const auto& ax : axes)
    if (!known(ax)) {
      std::string with = list(ax, true);
      throw error(detail::concat("unknown ", ax.option, " '", *ax.given, "'; valid ", ax.option + 2,
                                 with.empty() ? " names: " + list(ax, false)
                                              : " names with the other two axes as given: " + with,
                                 " (polymoe list shows every valid triple)"));
    }
  std::string msg = detail::concat("(a2a=", a, ", quant=", q, ", kernel=", k, ") is not a valid triple");
  for (const auto& ax : axes) {
    const std::string with = list(ax, true);
    if (!with.empty()) msg += detail::concat("; valid ", ax.option, " for the other two: ", with);
  }
  throw error(msg + " (polymoe list shows every valid triple)");
}

/// The names of the selected alternative.
inline triple_names names_of(const triple_variant& v) {
  return std::visit(
      [](auto t) {
        using T = decltype(t);
        return triple_names{T::a2a::name, T::quant::name, T::kernel::name};
      },
      v);
}

}  // namespace polymoe::cli
