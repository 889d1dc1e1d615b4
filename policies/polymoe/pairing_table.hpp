#pragma once
// THE PAIRING TABLE: which (dispatcher, quant scheme, kernel) triples are valid, as data.
//
// The validity of MoeLayer<A2A, Quant, Kernel> is computed from these lines alone (by
// <polymoe/core/pairing.hpp>); nothing else in polymoe decides it. To add a policy, write its file
// and add one line here:
//   - a dispatcher: one line in `dispatchers` (its format is declared in the dispatcher itself);
//   - a quant scheme: one line in `quants`, and its name in the `schemes<...>` of each kernel row
//     that implements it (the reference kernel implements every scheme);
//   - a kernel: one kernel_row with the formats it runs natively and the schemes it implements;
//   - an adapter or a fused path: one row.
// Policies are only declared here; include their headers (or <polymoe/polymoe.hpp>) to use them.
#include <boost/mp11/list.hpp>

#include <polymoe/core/formats.hpp>
#include <polymoe/core/pairing_rows.hpp>

namespace polymoe {
namespace a2a {
struct local;
class mpi_allgather;
class mpi_ragged;
class mpi_masked;
}
namespace quant {
struct fp32;
struct bf16;
}
namespace kernel {
struct reference;
struct tbb_grouped;
}

struct pairing_table {
  template <class... Ts>
  using list = boost::mp11::mp_list<Ts...>;
  using F_standard = format::standard;
  using F_ragged = format::ragged;
  using F_masked = format::masked;

  using dispatchers = list<
      a2a::local  // standard format, no communication
#if defined(POLYMOE_WITH_MPI)  // the optional MPI component (CMake target polymoe::mpi)
      , a2a::mpi_allgather  // standard: all-gather tokens, reduce-scatter partial sums
      , a2a::mpi_ragged     // ragged: DeepEP normal mode over MPI_Alltoallv
      , a2a::mpi_masked     // masked: DeepEP low-latency mode, fixed capacity per local expert
#endif
      >;

  using quants = list<
      quant::fp32,   // fp32 weights, fp32 activations
      quant::bf16>;  // bf16 weights and activations, fp32 accumulation

  using kernels = list<
      pairing::kernel_row<kernel::reference,   pairing::natives<F_standard, F_masked>, pairing::every_scheme>,
      pairing::kernel_row<kernel::tbb_grouped, pairing::natives<F_standard>,           pairing::schemes<quant::fp32, quant::bf16>>>;

  using adapters = list<
      pairing::adapter_row<F_ragged, F_standard>,   // a ragged batch is a standard one with counts
      pairing::adapter_row<F_masked, F_standard>,   // valid rows as tokens with k = 1, padding rows id -1
      pairing::adapter_row<F_standard, F_masked>>;  // sort by expert into padded rows, weighted sum back

  using fused = list<>;
};

}  // namespace polymoe
