// Run at configure time (try_run in tests/CMakeLists.txt): prints the core table as CMake code, so
// the tests' lists of policies follow the table instead of being typed.
//   set(POLYMOE_TABLE_DISPATCHERS ...) / _QUANTS / _KERNELS     the policies' names, in row order
//   set(POLYMOE_TABLE_KERNELS_OF_<scheme> ...)                  the kernels that implement a scheme
//   polymoe_table_case(NAME "ko type" "ok type" "regex")        one compile-fail case per kind of
//       invalid pairing the table contains: a kernel that lacks a scheme (one per kernel that lacks
//       any, with its first missing scheme), a kernel that cannot run a dispatcher's format.
#include <cstdio>
#include <string>
#include <string_view>

#include <boost/mp11/algorithm.hpp>

#include <polymoe/polymoe.hpp>

namespace mp = boost::mp11;
using namespace polymoe;

template <class T>
constexpr std::string_view type_name() {
  std::string_view f = __PRETTY_FUNCTION__;  // "... [with T = polymoe::quant::fp32; ...]"
  const auto b = f.find("T = ") + 4;
  return f.substr(b, f.find_first_of(";]", b) - b);
}

template <class List>
std::string names(std::string_view what) {
  std::string s = "polymoe::diagnostic::" + std::string(what) + "<";
  bool first = true;
  mp::mp_for_each<mp::mp_transform<mp::mp_identity, List>>([&](auto t) {
    s += (first ? "" : ", ") + std::string(type_name<typename decltype(t)::type>());
    first = false;
  });
  return s + ">";
}

template <class A, class Q, class K>
std::string layer(std::string_view table = "polymoe::core_table") {
  return "polymoe::basic_moe_layer<" + std::string(table) + ", " + std::string(type_name<A>()) + ", " +
         std::string(type_name<Q>()) + ", " + std::string(type_name<K>()) + ">";
}

void print_case(const std::string& name, const std::string& ko, const std::string& ok, const std::string& regex) {
  std::printf("polymoe_table_case(%s \"%s\" \"%s\" \"%s\")\n", name.c_str(), ko.c_str(), ok.c_str(), regex.c_str());
}

template <class List>
std::string policy_names() {
  std::string s;
  mp::mp_for_each<mp::mp_transform<mp::mp_identity, List>>([&](auto t) { s += " " + std::string(decltype(t)::type::name); });
  return s;
}

int main() {
  using T = core_table;
  using kernels = pairing::kernels_of<T>;
  using quants = pairing::quants_of<T>;
  using dispatchers = pairing::dispatchers_of<T>;
  std::printf("set(POLYMOE_TABLE_DISPATCHERS%s)\n", policy_names<dispatchers>().c_str());
  std::printf("set(POLYMOE_TABLE_QUANTS%s)\n", policy_names<quants>().c_str());
  std::printf("set(POLYMOE_TABLE_KERNELS%s)\n", policy_names<kernels>().c_str());
  mp::mp_for_each<mp::mp_transform<mp::mp_identity, quants>>([&](auto q) {
    using Q = typename decltype(q)::type;
    using has = mp::mp_copy_if_q<kernels, mp::mp_bind<pairing::implements, T, mp::_1, Q>>;
    std::printf("set(POLYMOE_TABLE_KERNELS_OF_%s%s)\n", std::string(Q::name).c_str(), policy_names<has>().c_str());
  });
  mp::mp_for_each<mp::mp_transform<mp::mp_identity, kernels>>([&](auto k) {
    using K = typename decltype(k)::type;
    // a kernel that lacks a scheme: its first missing one, the ok twin on a kernel that has it
    using missing = mp::mp_remove_if_q<quants, mp::mp_bind_front<pairing::implements, T, K>>;
    if constexpr (!mp::mp_empty<missing>::value) {
      using Q = mp::mp_front<missing>;
      using A = mp::mp_front<dispatchers>;
      using has = mp::mp_copy_if_q<kernels, mp::mp_bind<pairing::implements, T, mp::_1, Q>>;
      print_case("kernel_lacks_scheme." + std::string(K::name), layer<A, Q, K>(), layer<A, Q, mp::mp_front<has>>(),
                 "kernel_does_not_implement_quant_scheme<" + std::string(type_name<K>()) + ", " +
                     std::string(type_name<Q>()) + ", " +
                     names<pairing::kernel_schemes<T, K>>("schemes_this_kernel_implements") + ", " +
                     names<has>("kernels_that_implement_this_scheme") +
                     ".*polymoe: MoeLayer<A2A, Quant, Kernel>: the Kernel axis does not implement the Quant scheme");
    }
    // a kernel that cannot run a dispatcher's format: the first such dispatcher, with a scheme the
    // kernel implements; the ok twin on the reference-like first kernel that can
    mp::mp_for_each<mp::mp_transform<mp::mp_identity, dispatchers>>([&](auto a) {
      using A = typename decltype(a)::type;
      using F = typename A::format;
      using can = mp::mp_copy_if_q<kernels, mp::mp_bind_front<pairing::can_run, T, F>>;
      if constexpr (!pairing::can_run<T, F, K>::value && !mp::mp_empty<can>::value) {
        using Q = mp::mp_front<pairing::kernel_schemes<T, K>>;
        print_case("kernel_cannot_run_format." + std::string(K::name) + "." + std::string(A::name), layer<A, Q, K>(),
                   layer<A, Q, mp::mp_front<can>>(),
                   "polymoe: MoeLayer<A2A, Quant, Kernel>: the Kernel axis cannot run the dispatch format");
      }
    });
  });
  return 0;
}
