#pragma once
// The vocabulary of pairing tables: row templates that carry no behaviour, only the facts a table
// states, and the table itself, a type made of rows. A table extends another by adding rows:
//
//   using my_table = polymoe::pairing::extend<polymoe::core_table,
//       polymoe::pairing::scheme_row<my::int3, polymoe::pairing::on<my::kernel>>,
//       polymoe::pairing::kernel_row<my::kernel, polymoe::pairing::natives<polymoe::format::standard>>>;
//   polymoe::basic_moe_layer<my_table, polymoe::a2a::local, my::int3, my::kernel> layer(cfg, w);
//
// What the rows mean (whether a triple is valid, and how it runs) is computed in pairing.hpp.
#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>

#include <polymoe/core/memory_space.hpp>

namespace polymoe::pairing {

namespace mp = boost::mp11;

template <class... Formats>
struct natives {};   ///< the dispatch formats a kernel runs without an adapter
template <class... Schemes>
struct schemes {};   ///< quant schemes a kernel implements, named in its own row
struct every_scheme {};  ///< every scheme of the table (a kernel generic over polymoe::quant_scheme)
template <class... Kernels>
struct on {};        ///< the kernels, besides the generic ones, that implement a scheme

/// A token dispatcher of the table.
template <class A2A>
struct dispatcher_row {};

/// A quant scheme of the table, and the kernels (other than those that run every scheme) that
/// implement it: scheme_row<Q, on<K...>>.
template <class Quant, class Kernels = on<>>
struct scheme_row {};

/// A kernel and what it runs: kernel_row<K, natives<F...>, every_scheme | schemes<Q...>>. A kernel
/// with a list of its own gets more schemes from the scheme rows that name it in on<...>.
template <class Kernel, class Natives, class Schemes = schemes<>>
struct kernel_row {};

/// An adapter (the seeds' pre-/post-permute): runs a kernel that wants `To` on a dispatcher that
/// produces `From`, converting the dispatch output before the kernel and its output after, in the
/// memory space `Space` (a kernel of another space finds no adapter in this row).
template <class From, class To, class Space = space::host>
struct adapter_row {};

/// A fused path: the triple runs one specialised routine instead of dispatch, run and combine.
template <class A2A, class Quant, class Kernel>
struct fused_row {};

/// A pairing table: its rows, in order. The order of rows of one kind is the order of the lists
/// derived from them (valid triples, names offered in messages and by the tools). Anything with a
/// `rows` list is a table; deriving a named struct from one keeps diagnostics short:
///   struct my_table : polymoe::pairing::extend<polymoe::core_table, ...> {};
template <class... Rows>
struct table {
  using rows = mp::mp_list<Rows...>;
};

/// The table `Base` with `Rows` added after its own: how an optional component (the MPI
/// dispatchers, a GPU kernel family) or a user contributes policies without editing a table.
template <class Base, class... Rows>
using extend = mp::mp_rename<mp::mp_push_back<typename Base::rows, Rows...>, table>;

/// The table `Base` with the rows of table `More` added after its own: a component's rows, kept
/// as a table of their own, added to whichever table a program builds on.
template <class Base, class More>
using join = mp::mp_rename<mp::mp_append<typename Base::rows, typename More::rows>, table>;

}  // namespace polymoe::pairing
