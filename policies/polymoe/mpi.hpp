#pragma once
// Umbrella header of the MPI component (link polymoe::mpi): the core, the MPI dispatchers and
// their table, and every valid triple of it.
#include <polymoe/a2a/mpi_allgather.hpp>
#include <polymoe/a2a/mpi_masked.hpp>
#include <polymoe/a2a/mpi_ragged.hpp>
#include <polymoe/mpi_table.hpp>
#include <polymoe/polymoe.hpp>

namespace polymoe {
/// Every valid triple of mpi_table (the core table's first, then the MPI dispatchers').
using mpi_valid_triples = pairing::valid_triples_of<mpi_table>;
}  // namespace polymoe
