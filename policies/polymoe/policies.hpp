#pragma once
// Every policy listed in the pairing table.
#include <polymoe/a2a/local.hpp>
#if defined(POLYMOE_WITH_MPI)
#include <polymoe/a2a/mpi_allgather.hpp>
#include <polymoe/a2a/mpi_masked.hpp>
#include <polymoe/a2a/mpi_ragged.hpp>
#endif
#include <polymoe/kernel/reference.hpp>
#include <polymoe/kernel/tbb_grouped.hpp>
#include <polymoe/kernel/tiled.hpp>
#include <polymoe/kernel/tiled_amx.hpp>
#include <polymoe/quant/bf16.hpp>
#include <polymoe/quant/fp32.hpp>
#include <polymoe/quant/fp8.hpp>
#include <polymoe/quant/fp8_block.hpp>
#include <polymoe/quant/int8_w8a8.hpp>
#include <polymoe/quant/mxfp4.hpp>
#include <polymoe/quant/nvfp4.hpp>

#include <polymoe/core/pairing.hpp>

namespace polymoe {
/// Every valid (A2A, Quant, Kernel) triple, each an mp_list<A2A, Quant, Kernel>; tests, benchmarks
/// and the command-line tool iterate it with boost::mp11::mp_for_each.
using valid_triples = pairing::valid_triples_of<>;
}  // namespace polymoe
