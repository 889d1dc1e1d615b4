#pragma once
// Computes, from a pairing table (a type made of rows, pairing_rows.hpp), whether a layer of
// (A2A, Quant, Kernel) is valid and how it runs:
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
#include <polymoe/core/formats.hpp>
#include <polymoe/core/memory_space.hpp>
#include <polymoe/core/pairing_rows.hpp>

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
template <class... Ts> struct memory_spaces_this_dispatcher_carries {};
template <class... Ts> struct dispatchers_that_carry_this_space {};

// Each diagnostic fails when instantiated, once. Search the compiler output for its name: the
// template arguments printed with it are the offending types and the valid alternatives.
template <class A2A, class Valid>
struct a2a_axis_is_not_a_dispatcher {
  static_assert(detail::dependent_false<A2A>,
                "polymoe: MoeLayer<A2A, Quant, Kernel>: the A2A axis is not a dispatcher (it lacks "
                "`using a2a_concept = polymoe::a2a_tag;`); use one of the dispatchers listed in "
                "polymoe::diagnostic::valid_dispatchers<...> in the instantiation above");
};
template <class A2A, class Valid, class Table>
struct dispatcher_not_in_pairing_table {
  static_assert(detail::dependent_false<A2A>,
                "polymoe: MoeLayer<A2A, Quant, Kernel>: the A2A axis is a dispatcher but has no dispatcher_row in "
                "the layer's pairing table (the Table argument above); use a table that has one (MoeLayer is "
                "polymoe::core_table's; polymoe::MpiMoeLayer has the MPI dispatchers), extend one with "
                "polymoe::pairing::extend<Table, polymoe::pairing::dispatcher_row<A2A>>, or use one of "
                "polymoe::diagnostic::valid_dispatchers<...> in the instantiation above");
};
template <class Quant, class Valid>
struct quant_axis_is_not_a_quant_scheme {
  static_assert(detail::dependent_false<Quant>,
                "polymoe: MoeLayer<A2A, Quant, Kernel>: the Quant axis is not a quant scheme (it lacks "
                "`using quant_concept = polymoe::quant_tag;`); use one of the schemes listed in "
                "polymoe::diagnostic::valid_quant_schemes<...> in the instantiation above");
};
template <class Quant, class Valid, class Table>
struct quant_scheme_not_in_pairing_table {
  static_assert(detail::dependent_false<Quant>,
                "polymoe: MoeLayer<A2A, Quant, Kernel>: the Quant axis is a quant scheme but is not listed in "
                "the layer's pairing table (the Table argument above) as a scheme_row; extend the table with "
                "polymoe::pairing::extend<Table, polymoe::pairing::scheme_row<Quant>> or use one of "
                "polymoe::diagnostic::valid_quant_schemes<...> in the instantiation above");
};
template <class Kernel, class Valid>
struct kernel_axis_is_not_an_expert_kernel {
  static_assert(detail::dependent_false<Kernel>,
                "polymoe: MoeLayer<A2A, Quant, Kernel>: the Kernel axis is not an expert kernel (it lacks "
                "`using kernel_concept = polymoe::kernel_tag;`); use one of the kernels listed in "
                "polymoe::diagnostic::valid_kernels<...> in the instantiation above");
};
template <class Kernel, class Valid, class Table>
struct kernel_not_in_pairing_table {
  static_assert(detail::dependent_false<Kernel>,
                "polymoe: MoeLayer<A2A, Quant, Kernel>: the Kernel axis is an expert kernel but has no kernel_row "
                "in the layer's pairing table (the Table argument above); extend the table with "
                "polymoe::pairing::extend<Table, polymoe::pairing::kernel_row<Kernel, ...>> or use one of "
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
                "axis produces, natively or through an adapter_row of the table; choose a "
                "kernel from polymoe::diagnostic::kernels_that_can_run_this_format<...> or a dispatcher whose "
                "format is in polymoe::diagnostic::formats_this_kernel_runs<...> (both in the instantiation above)");
};
template <class A2A, class DispatcherSpaces, class Kernel, class KernelSpace, class DispatchersOfSpace>
struct dispatcher_does_not_carry_the_kernel_memory_space {
  static_assert(detail::dependent_false<A2A>,
                "polymoe: MoeLayer<A2A, Quant, Kernel>: the Kernel axis computes in a memory space (KernelSpace "
                "above) that the A2A axis does not carry (polymoe::diagnostic::memory_spaces_this_dispatcher_carries"
                "<...> above); choose a dispatcher from polymoe::diagnostic::dispatchers_that_carry_this_space<...> "
                "or a kernel that computes in one of the dispatcher's spaces");
};
}  // namespace diagnostic

namespace pairing {

/// The result of resolving a triple: ok<Path, SharedPath> or failure<Diagnostic>. SharedPath is
/// how the kernel runs the standard format (shared experts run locally, in that format). The
/// diagnostic is named but not instantiated until someone asks for the layer itself.
template <class Path, class SharedPath = path::native>
struct ok {
  using path = Path;
  using shared_path = SharedPath;
};
template <class Diagnostic>
struct failure {
  using diagnostic = Diagnostic;
};

// ---- what a table's rows say -------------------------------------------------------------------

template <class Row> struct is_dispatcher_row : std::false_type {};
template <class A> struct is_dispatcher_row<dispatcher_row<A>> : std::true_type {};
template <class Row> struct is_scheme_row : std::false_type {};
template <class Q, class On> struct is_scheme_row<scheme_row<Q, On>> : std::true_type {};
template <class Row> struct is_kernel_row : std::false_type {};
template <class K, class N, class S> struct is_kernel_row<kernel_row<K, N, S>> : std::true_type {};
template <class Row> struct is_adapter_row : std::false_type {};
template <class From, class To, class S> struct is_adapter_row<adapter_row<From, To, S>> : std::true_type {};
template <class Row> struct is_fused_row : std::false_type {};
template <class A, class Q, class K> struct is_fused_row<fused_row<A, Q, K>> : std::true_type {};

template <class Row> struct row_policy;
template <class A> struct row_policy<dispatcher_row<A>> { using type = A; };
template <class Q, class On> struct row_policy<scheme_row<Q, On>> { using type = Q; };
template <class K, class N, class S> struct row_policy<kernel_row<K, N, S>> { using type = K; };
template <class Row> using row_policy_t = typename row_policy<Row>::type;

template <class Table> using dispatcher_rows = mp::mp_copy_if<typename Table::rows, is_dispatcher_row>;
template <class Table> using scheme_rows = mp::mp_copy_if<typename Table::rows, is_scheme_row>;
template <class Table> using kernel_rows = mp::mp_copy_if<typename Table::rows, is_kernel_row>;
template <class Table> using adapter_rows = mp::mp_copy_if<typename Table::rows, is_adapter_row>;
template <class Table> using fused_rows = mp::mp_copy_if<typename Table::rows, is_fused_row>;

/// The table's policies of each axis, in row order.
template <class Table> using dispatchers_of = mp::mp_transform<row_policy_t, dispatcher_rows<Table>>;
template <class Table> using quants_of = mp::mp_transform<row_policy_t, scheme_rows<Table>>;
template <class Table> using kernels_of = mp::mp_transform<row_policy_t, kernel_rows<Table>>;

template <class Table, class K>
using kernel_row_of = mp::mp_at<kernel_rows<Table>, mp::mp_find<kernels_of<Table>, K>>;

template <class Row> struct row_traits;
template <class K, class... Fs, class S>
struct row_traits<kernel_row<K, natives<Fs...>, S>> {
  using formats = mp::mp_list<Fs...>;
  using own_schemes = S;
};
template <class Q, class... Ks>
struct row_traits<scheme_row<Q, on<Ks...>>> {
  using kernels = mp::mp_list<Ks...>;
};

template <class Own, class Q> struct names_scheme : std::false_type {};
template <class Q> struct names_scheme<every_scheme, Q> : std::true_type {};
template <class... Qs, class Q> struct names_scheme<schemes<Qs...>, Q> : mp::mp_contains<mp::mp_list<Qs...>, Q> {};

/// Whether the table says kernel K implements scheme Q: K's row runs every scheme or names Q, or
/// Q's scheme row names K.
template <class Table, class K, class Q>
struct implements_impl {
  using own = typename row_traits<kernel_row_of<Table, K>>::own_schemes;
  template <class Row>
  using names_k = mp::mp_and<std::is_same<row_policy_t<Row>, Q>, mp::mp_contains<typename row_traits<Row>::kernels, K>>;
  static constexpr bool by_scheme_row = mp::mp_any_of<scheme_rows<Table>, names_k>::value;
  static constexpr bool value = names_scheme<own, Q>::value || by_scheme_row;
};
template <class Table, class K, class Q>
using implements = mp::mp_bool<implements_impl<Table, K, Q>::value>;

/// The schemes kernel K implements, in the table's scheme order.
template <class Table, class K>
using kernel_schemes = mp::mp_copy_if_q<quants_of<Table>, mp::mp_bind_front<implements, Table, K>>;
template <class Table, class K>
using kernel_formats = typename row_traits<kernel_row_of<Table, K>>::formats;

template <class Table, class From, class To, class Space>
using has_adapter = mp::mp_contains<adapter_rows<Table>, adapter_row<From, To, Space>>;

/// The first format the kernel runs natively that `From` can be adapted to (void if none).
template <class Table, class K, class From>
struct adapter_target {
  template <class To>
  using reachable = has_adapter<Table, From, To, kernel_memory_space<K>>;
  using formats = kernel_formats<Table, K>;
  using index = mp::mp_find_if<formats, reachable>;
  using type = mp::mp_eval_if_c<index::value == mp::mp_size<formats>::value, void, mp::mp_at, formats, index>;
};

template <class Table, class F, class K>
using can_run = mp::mp_bool<mp::mp_contains<kernel_formats<Table, K>, F>::value ||
                            !std::is_void_v<typename adapter_target<Table, K, F>::type>>;

/// How kernel K runs dispatch format F: natively, or through the first adapter to a native format.
template <class Table, class K, class F>
using path_for = std::conditional_t<mp::mp_contains<kernel_formats<Table, K>, F>::value, path::native,
                                    path::adapted<typename adapter_target<Table, K, F>::type>>;

/// A table is well formed when no policy has two rows and every kernel a scheme row names has a
/// row of its own (checked once per table, where a layer of it is resolved).
template <class Table>
struct well_formed {
  template <class K>
  using listed_kernel = mp::mp_contains<kernels_of<Table>, K>;
  template <class Row>
  using names_listed_kernels = mp::mp_all_of<typename row_traits<Row>::kernels, listed_kernel>;
  static_assert(mp::mp_is_set<dispatchers_of<Table>>::value,
                "polymoe: pairing table: a dispatcher has two dispatcher_rows");
  static_assert(mp::mp_is_set<quants_of<Table>>::value, "polymoe: pairing table: a quant scheme has two scheme_rows");
  static_assert(mp::mp_is_set<kernels_of<Table>>::value, "polymoe: pairing table: a kernel has two kernel_rows");
  static_assert(mp::mp_all_of<scheme_rows<Table>, names_listed_kernels>::value,
                "polymoe: pairing table: a scheme_row names in on<...> a kernel that has no kernel_row");
  static constexpr bool value = true;
};

template <class List, template <class...> class As>
using as = mp::mp_rename<List, As>;

/// Whether dispatcher A carries memory space S (memory_space.hpp).
template <class A, class S>
using carries = mp::mp_contains<dispatcher_memory_spaces<A>, S>;

template <class Table, class A2A, class Quant, class Kernel>
consteval auto resolve_fn() {
  namespace d = diagnostic;
  static_assert(well_formed<Table>::value);
  using dispatchers = dispatchers_of<Table>;
  using quants = quants_of<Table>;
  using kernels = kernels_of<Table>;
  if constexpr (!mp::mp_contains<dispatchers, A2A>::value) {
    if constexpr (opts_into_a2a<A2A>)
      return std::type_identity<failure<d::dispatcher_not_in_pairing_table<A2A, as<dispatchers, d::valid_dispatchers>, Table>>>{};
    else
      return std::type_identity<failure<d::a2a_axis_is_not_a_dispatcher<A2A, as<dispatchers, d::valid_dispatchers>>>>{};
  } else if constexpr (!mp::mp_contains<quants, Quant>::value) {
    if constexpr (opts_into_quant<Quant>)
      return std::type_identity<failure<d::quant_scheme_not_in_pairing_table<Quant, as<quants, d::valid_quant_schemes>, Table>>>{};
    else
      return std::type_identity<failure<d::quant_axis_is_not_a_quant_scheme<Quant, as<quants, d::valid_quant_schemes>>>>{};
  } else if constexpr (!mp::mp_contains<kernels, Kernel>::value) {
    if constexpr (opts_into_kernel<Kernel>)
      return std::type_identity<failure<d::kernel_not_in_pairing_table<Kernel, as<kernels, d::valid_kernels>, Table>>>{};
    else
      return std::type_identity<failure<d::kernel_axis_is_not_an_expert_kernel<Kernel, as<kernels, d::valid_kernels>>>>{};
  } else if constexpr (mp::mp_contains<fused_rows<Table>, fused_row<A2A, Quant, Kernel>>::value) {
    return std::type_identity<ok<path::fused, path_for<Table, Kernel, format::standard>>>{};
  } else if constexpr (!implements<Table, Kernel, Quant>::value) {
    using kernels_of_scheme = mp::mp_copy_if_q<kernels, mp::mp_bind<implements, Table, mp::_1, Quant>>;
    return std::type_identity<failure<d::kernel_does_not_implement_quant_scheme<
        Kernel, Quant, as<kernel_schemes<Table, Kernel>, d::schemes_this_kernel_implements>,
        as<kernels_of_scheme, d::kernels_that_implement_this_scheme>>>>{};
  } else if constexpr (!carries<A2A, kernel_memory_space<Kernel>>::value) {
    using S = kernel_memory_space<Kernel>;
    using carriers = mp::mp_copy_if_q<dispatchers, mp::mp_bind_back<carries, S>>;
    return std::type_identity<failure<d::dispatcher_does_not_carry_the_kernel_memory_space<
        A2A, as<dispatcher_memory_spaces<A2A>, d::memory_spaces_this_dispatcher_carries>, Kernel, S,
        as<carriers, d::dispatchers_that_carry_this_space>>>>{};
  } else {
    using F = typename A2A::format;
    if constexpr (can_run<Table, F, Kernel>::value) {
      return std::type_identity<ok<path_for<Table, Kernel, F>, path_for<Table, Kernel, format::standard>>>{};
    } else {
      using kernels_of_format = mp::mp_copy_if_q<kernels, mp::mp_bind_front<can_run, Table, F>>;
      return std::type_identity<failure<d::kernel_cannot_run_dispatch_format<
          A2A, F, Kernel, as<kernel_formats<Table, Kernel>, d::formats_this_kernel_runs>,
          as<kernels_of_format, d::kernels_that_can_run_this_format>>>>{};
    }
  }
}

template <class Table, class A2A, class Quant, class Kernel>
using resolve = typename decltype(resolve_fn<Table, A2A, Quant, Kernel>())::type;

template <class T>
struct is_ok : std::false_type {};
template <class P, class S>
struct is_ok<ok<P, S>> : std::true_type {};

template <class Table, class Triple>
struct triple_ok;
template <class Table, class A, class Q, class K>
struct triple_ok<Table, mp::mp_list<A, Q, K>> : is_ok<resolve<Table, A, Q, K>> {};

/// Every valid triple of the table, as mp_list<A2A, Quant, Kernel> elements: the cartesian product
/// of its policies filtered by validity, dispatcher-major, then scheme, then kernel, each in row
/// order. (Evaluated where the policies are complete: the dispatchers' formats are needed.)
template <class Table>
using valid_triples_of = mp::mp_copy_if_q<mp::mp_product<mp::mp_list, dispatchers_of<Table>, quants_of<Table>, kernels_of<Table>>,
                                          mp::mp_bind_front<triple_ok, Table>>;

}  // namespace pairing

/// True when basic_moe_layer<Table, A2A, Quant, Kernel> is a valid layer (the soft, SFINAE-friendly
/// check); can_make_layer<A, Q, K> (pairing_table.hpp) asks it of the core table.
template <class Table, class A2A, class Quant, class Kernel>
inline constexpr bool can_make_layer_in = pairing::is_ok<pairing::resolve<Table, A2A, Quant, Kernel>>::value;

/// How a valid triple of the table runs (path::native, path::adapted<F> or path::fused).
template <class Table, class A2A, class Quant, class Kernel>
using pairing_path_in = typename pairing::resolve<Table, A2A, Quant, Kernel>::path;

}  // namespace polymoe
