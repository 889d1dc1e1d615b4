#pragma once
// The MPI component's pairing table: the core table and the dispatchers that exchange tokens
// between processes (CMake target polymoe::mpi). Including it does not change the core table: a
// layer of these dispatchers is a layer of this table, polymoe::MpiMoeLayer<A2A, Quant, Kernel>.
#include <polymoe/pairing_table.hpp>

namespace polymoe {
namespace a2a {
class mpi_allgather;
class mpi_ragged;
class mpi_masked;
}  // namespace a2a

struct mpi_table : pairing::extend<core_table,
                                   pairing::dispatcher_row<a2a::mpi_allgather>,  // standard: all-gather tokens, per-slot rows back to the owner
                                   pairing::dispatcher_row<a2a::mpi_ragged>,     // ragged: DeepEP normal mode over MPI_Alltoallv
                                   pairing::dispatcher_row<a2a::mpi_masked>> {}; // masked: DeepEP low-latency mode, fixed capacity per local expert

/// A layer of the MPI table (its local triples are the core table's, the same instances).
template <class A2A, class Quant, class Kernel>
using MpiMoeLayer = basic_moe_layer<mpi_table, A2A, Quant, Kernel>;

}  // namespace polymoe
