#pragma once
// The vocabulary of the pairing table (policies/polymoe/pairing_table.hpp): row templates that
// carry no behaviour, only the facts the table states.
#include <boost/mp11/list.hpp>

namespace polymoe::pairing {

template <class... Formats>
struct natives {};   ///< the dispatch formats a kernel runs without an adapter
template <class... Schemes>
struct schemes {};   ///< the quant schemes a kernel implements
struct every_scheme {};  ///< stands for every scheme in the table (the reference kernel)

/// A kernel and what it runs: kernel_row<K, natives<F...>, schemes<Q...>>.
template <class Kernel, class Natives, class Schemes>
struct kernel_row {};

/// An adapter (the seeds' pre-/post-permute): runs a kernel that wants `To` on a dispatcher that
/// produces `From`, converting the dispatch output before the kernel and its output after.
template <class From, class To>
struct adapter_row {};

/// A fused path: the triple runs one specialised routine instead of dispatch, run and combine.
template <class A2A, class Quant, class Kernel>
struct fused_row {};

}  // namespace polymoe::pairing
