#pragma once
// Every policy of the core pairing table (the MPI component's are in <polymoe/mpi.hpp>).
#include <polymoe/a2a/local.hpp>
#include <polymoe/kernel/reference.hpp>
#include <polymoe/kernel/tbb_grouped.hpp>
#include <polymoe/kernel/tiled.hpp>
#include <polymoe/kernel/tiled_amx.hpp>
#include <polymoe/pairing_table.hpp>
#include <polymoe/quant/bf16.hpp>
#include <polymoe/quant/fp32.hpp>
#include <polymoe/quant/fp8.hpp>
#include <polymoe/quant/fp8_block.hpp>
#include <polymoe/quant/int4_w4a8.hpp>
#include <polymoe/quant/int8_w8a8.hpp>
#include <polymoe/quant/mxfp4.hpp>
#include <polymoe/quant/nvfp4.hpp>

namespace polymoe {
/// Every valid (A2A, Quant, Kernel) triple of the core table, each an mp_list<A2A, Quant, Kernel>;
/// tests, benchmarks and the command-line tool iterate it with boost::mp11::mp_for_each.
using valid_triples = pairing::valid_triples_of<core_table>;
}  // namespace polymoe
