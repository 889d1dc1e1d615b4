#pragma once
// Computes, from the pairing table, whether MoeLayer<A2A, Quant, Kernel> is valid and how it runs:
// natively, through an adapter, or on a fused path. An invalid triple resolves to a diagnostic type
// whose instantiation is the one compile error the user sees; its template arguments name the
// offending policies and list what would work instead.
#include <type_traits>

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/bind.hpp>
#include <boost/mp11/list.hpp>
#include <boost/mp11/utility.hpp>

#include <polymoe/core/detail/dependent_false.hpp>
#include <polymoe/core/roles.hpp>
#include <polymoe/pairing_table.hpp>

namespace polymoe {

namespace path {
struct native {};  ///< the kernel runs the dispatcher's format as it is
template <class To>
struct adapted {};  ///< pre-permute to format To, run, post-permute back
struct fused {};    ///< a routine specialised for the whole triple
}  // namespace path

namespace diagnostic {
// Lists printed inside diagnostics: "what would work".
template <class... Ts> struct valid_dispatchers {};
template <class... Ts> struct valid_quant_schemes {};
template <class... Ts> struct valid_kernels {};
template <class... Ts> struct schemes_this_kernel_implements {};
template <class... Ts> struct kernels_that_implement_this_scheme {};
template <class... Ts> struct formats_this_kernel_runs {};
template <class... Ts> struct kernels_that_can_run_this_format {};

// Each diagnostic fails when instantiated, once. Search the compiler output for its name: the
// template arguments printed with it are the offending types and the valid alternatives.
template <class A2A, class Valid>
struct a2a_axis_is_not_a_dispatcher {
  static_assert(detail::dependent_false<A2A>,
                "polymoe: MoeLayer<A2A, Quant, Kernel>: the A2A axis is not a dispatcher (it lacks "
                "`using a2a_concept = polymoe::a2a_tag;`); use one of the dispatchers listed in "
                "polymoe::diagnostic::valid_dispatchers<...> in the instantiation above");
};
template <class A2A, class Valid>
struct dispatcher_not_in_pairing_table {
  static_assert(detail::dependent_false<A2A>,
                "polymoe: MoeLayer<A2A, Quant, Kernel>: the A2A axis is a dispatcher but is not listed in "
                "polymoe::pairing_table::dispatchers (policies/polymoe/pairing_table.hpp); add it there or use "
                "one of polymoe::diagnostic::valid_dispatchers<...> in the instantiation above");
};
template <class Quant, class Valid>
struct quant_axis_is_not_a_quant_scheme {
  static_assert(detail::dependent_false<Quant>,
                "polymoe: MoeLayer<A2A, Quant, Kernel>: the Quant axis is not a quant scheme (it lacks "
                "`using quant_concept = polymoe::quant_tag;`); use one of the schemes listed in "
                "polymoe::diagnostic::valid_quant_schemes<...> in the instantiation above");
};
template <class Quant, class Valid>
struct quant_scheme_not_in_pairing_table {
  static_assert(detail::dependent_false<Quant>,
                "polymoe: MoeLayer<A2A, Quant, Kernel>: the Quant axis is a quant scheme but is not listed in "
                "polymoe::pairing_table::quants (policies/polymoe/pairing_table.hpp); add it there or use one of "
                "polymoe::diagnostic::valid_quant_schemes<...> in the instantiation above");
};
template <class Kernel, class Valid>
struct kernel_axis_is_not_an_expert_kernel {
  static_assert(detail::dependent_false<Kernel>,
                "polymoe: MoeLayer<A2A, Quant, Kernel>: the Kernel axis is not an expert kernel (it lacks "
                "`using kernel_concept = polymoe::kernel_tag;`); use one of the kernels listed in "
                "polymoe::diagnostic::valid_kernels<...> in the instantiation above");
};
template <class Kernel, class Valid>
struct kernel_not_in_pairing_table {
  static_assert(detail::dependent_false<Kernel>,
                "polymoe: MoeLayer<A2A, Quant, Kernel>: the Kernel axis is an expert kernel but has no kernel_row "
                "in polymoe::pairing_table::kernels (policies/polymoe/pairing_table.hpp); add one or use one of "
                "polymoe::diagnostic::valid_kernels<...> in the instantiation above");
};
template <class Kernel, class Quant, class SchemesOfKernel, class KernelsOfScheme>
struct kernel_does_not_implement_quant_scheme {
  static_assert(detail::dependent_false<Kernel>,
                "polymoe: MoeLayer<A2A, Quant, Kernel>: the Kernel axis does not implement the Quant scheme; "
                "choose a scheme from polymoe::diagnostic::schemes_this_kernel_implements<...> or a kernel from "
                "polymoe::diagnostic::kernels_that_implement_this_scheme<...> (both in the instantiation above)");
};
template <class A2A, class Format, class Kernel, class FormatsOfKernel, class KernelsOfFormat>
struct kernel_cannot_run_dispatch_format {
  static_assert(detail::dependent_false<A2A>,
                "polymoe: MoeLayer<A2A, Quant, Kernel>: the Kernel axis cannot run the dispatch format the A2A "
                "axis produces, natively or through an adapter in polymoe::pairing_table::adapters; choose a "
                "kernel from polymoe::diagnostic::kernels_that_can_run_this_format<...> or a dispatcher whose "
                "format is in polymoe::diagnostic::formats_this_kernel_runs<...> (both in the instantiation above)");
};
}  // namespace diagnostic

namespace pairing {

/// The result of resolving a triple: ok<Path> or failure<Diagnostic>. The diagnostic is named but
/// not instantiated until someone asks for the layer itself.
template <class Path>
struct ok {
  using path = Path;
};
template <class Diagnostic>
struct failure {
  using diagnostic = Diagnostic;
};

namespace mp = boost::mp11;
using table = pairing_table;

template <class S>
struct scheme_list;
template <class... Qs>
struct scheme_list<schemes<Qs...>> {
  using type = mp::mp_list<Qs...>;
};
template <>
struct scheme_list<every_scheme> {
  using type = table::quants;
};

template <class Row>
struct row_traits;
template <class K, class... Fs, class S>
struct row_traits<kernel_row<K, natives<Fs...>, S>> {
  using kernel = K;
  using formats = mp::mp_list<Fs...>;
  using schemes = typename scheme_list<S>::type;
};

template <class Row>
using row_kernel = typename row_traits<Row>::kernel;
using kernel_policies = mp::mp_transform<row_kernel, table::kernels>;

template <class K>
using kernel_row_of = mp::mp_at<table::kernels, mp::mp_find<kernel_policies, K>>;
template <class K>
using kernel_schemes = typename row_traits<kernel_row_of<K>>::schemes;
template <class K>
using kernel_formats = typename row_traits<kernel_row_of<K>>::formats;

template <class K, class Q>
using implements = mp::mp_contains<kernel_schemes<K>, Q>;
template <class From, class To>
using has_adapter = mp::mp_contains<table::adapters, adapter_row<From, To>>;

/// The first format the kernel runs natively that `From` can be adapted to (void if none).
template <class K, class From>
struct adapter_target {
  template <class To>
  using reachable = has_adapter<From, To>;
  using formats = kernel_formats<K>;
  using index = mp::mp_find_if<formats, reachable>;
  using type = mp::mp_eval_if_c<index::value == mp::mp_size<formats>::value, void, mp::mp_at, formats, index>;
};

template <class F, class K>
using can_run = mp::mp_bool<mp::mp_contains<kernel_formats<K>, F>::value ||
                            !std::is_void_v<typename adapter_target<K, F>::type>>;

template <class List, template <class...> class As>
using as = mp::mp_rename<List, As>;

template <class A2A, class Quant, class Kernel>
consteval auto resolve_fn() {
  namespace d = diagnostic;
  if constexpr (!mp::mp_contains<table::dispatchers, A2A>::value) {
    if constexpr (opts_into_a2a<A2A>)
      return std::type_identity<failure<d::dispatcher_not_in_pairing_table<A2A, as<table::dispatchers, d::valid_dispatchers>>>>{};
    else
      return std::type_identity<failure<d::a2a_axis_is_not_a_dispatcher<A2A, as<table::dispatchers, d::valid_dispatchers>>>>{};
  } else if constexpr (!mp::mp_contains<table::quants, Quant>::value) {
    if constexpr (opts_into_quant<Quant>)
      return std::type_identity<failure<d::quant_scheme_not_in_pairing_table<Quant, as<table::quants, d::valid_quant_schemes>>>>{};
    else
      return std::type_identity<failure<d::quant_axis_is_not_a_quant_scheme<Quant, as<table::quants, d::valid_quant_schemes>>>>{};
  } else if constexpr (!mp::mp_contains<kernel_policies, Kernel>::value) {
    if constexpr (opts_into_kernel<Kernel>)
      return std::type_identity<failure<d::kernel_not_in_pairing_table<Kernel, as<kernel_policies, d::valid_kernels>>>>{};
    else
      return std::type_identity<failure<d::kernel_axis_is_not_an_expert_kernel<Kernel, as<kernel_policies, d::valid_kernels>>>>{};
  } else if constexpr (mp::mp_contains<table::fused, fused_row<A2A, Quant, Kernel>>::value) {
    return std::type_identity<ok<path::fused>>{};
  } else if constexpr (!implements<Kernel, Quant>::value) {
    using kernels_of_scheme = mp::mp_copy_if_q<kernel_policies, mp::mp_bind_back<implements, Quant>>;
    return std::type_identity<failure<d::kernel_does_not_implement_quant_scheme<
        Kernel, Quant, as<kernel_schemes<Kernel>, d::schemes_this_kernel_implements>,
        as<kernels_of_scheme, d::kernels_that_implement_this_scheme>>>>{};
  } else {
    using F = typename A2A::format;
    if constexpr (mp::mp_contains<kernel_formats<Kernel>, F>::value) {
      return std::type_identity<ok<path::native>>{};
    } else if constexpr (!std::is_void_v<typename adapter_target<Kernel, F>::type>) {
      return std::type_identity<ok<path::adapted<typename adapter_target<Kernel, F>::type>>>{};
    } else {
      using kernels_of_format = mp::mp_copy_if_q<kernel_policies, mp::mp_bind_front<can_run, F>>;
      return std::type_identity<failure<d::kernel_cannot_run_dispatch_format<
          A2A, F, Kernel, as<kernel_formats<Kernel>, d::formats_this_kernel_runs>,
          as<kernels_of_format, d::kernels_that_can_run_this_format>>>>{};
    }
  }
}

template <class A2A, class Quant, class Kernel>
using resolve = typename decltype(resolve_fn<A2A, Quant, Kernel>())::type;

template <class T>
struct is_ok : std::false_type {};
template <class P>
struct is_ok<ok<P>> : std::true_type {};

}  // namespace pairing

/// True when MoeLayer<A2A, Quant, Kernel> is a valid layer (the soft, SFINAE-friendly check).
template <class A2A, class Quant, class Kernel>
inline constexpr bool can_make_layer = pairing::is_ok<pairing::resolve<A2A, Quant, Kernel>>::value;

/// How a valid triple runs (path::native, path::adapted<F> or path::fused).
template <class A2A, class Quant, class Kernel>
using pairing_path = typename pairing::resolve<A2A, Quant, Kernel>::path;

namespace pairing {
template <class Triple>
struct triple_ok;
template <class A, class Q, class K>
struct triple_ok<mp::mp_list<A, Q, K>> : is_ok<resolve<A, Q, K>> {};

/// Every valid triple, as mp_list<A2A, Quant, Kernel> elements: the cartesian product of the
/// table's policies filtered by validity. (Evaluated where the policies are complete: see
/// polymoe::valid_triples in <polymoe/policies.hpp>.)
template <class Table = table>
using valid_triples_of = mp::mp_copy_if<
    mp::mp_product<mp::mp_list, typename Table::dispatchers, typename Table::quants, kernel_policies>, triple_ok>;
}  // namespace pairing

}  // namespace polymoe
