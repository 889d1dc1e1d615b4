#pragma once
// The tool's run-time selection of a layer (polymoe/selection.hpp) over the tool's table: the core
// table, with the MPI component the MPI table, with the CUDA component kernel::cuda's row added, and
// with the NCCL component the NCCL dispatchers' rows.
#include <string>
#include <string_view>
#include <vector>

#include <polymoe/polymoe.hpp>
#include <polymoe/selection.hpp>
#if defined(POLYMOE_WITH_MPI)
#include <polymoe/mpi.hpp>
#endif
#if defined(POLYMOE_WITH_CUDA)
#include <polymoe/cuda_table.hpp>
#endif
#if defined(POLYMOE_WITH_NCCL)
#include <polymoe/nccl.hpp>
#endif

namespace polymoe::cli {

/// The table the tool selects from: the program links the MPI component or it does not, and the
/// CUDA component or it does not (its layers take the host-memory conveniences: copies each way).
#if defined(POLYMOE_WITH_MPI)
using tool_base_table = mpi_table;
#else
using tool_base_table = core_table;
#endif
#if defined(POLYMOE_WITH_NCCL)
struct tool_table
    : pairing::join<pairing::extend<tool_base_table, table_rows::cuda_kernel>, table_rows::nccl_dispatchers> {};
#elif defined(POLYMOE_WITH_CUDA)
struct tool_table : pairing::extend<tool_base_table, table_rows::cuda_kernel> {};
#else
using tool_table = tool_base_table;
#endif
using tool_triples = pairing::valid_triples_of<tool_table>;

/// The layer type of a triple of the tool's table.
template <class A2A, class Quant, class Kernel>
using tool_layer = basic_moe_layer<tool_table, A2A, Quant, Kernel>;

using selection::triple_names;
using selection::normalize_name;
using triple_variant = selection::triple_variant<tool_triples>;

/// The tool's messages name the axes by their options and point at `polymoe list`.
inline constexpr selection::axis_labels tool_labels{"--a2a", "--quant", "--kernel",
                                                    " (polymoe list shows every valid triple)"};

/// The names of every valid triple, in tool_triples order.
inline std::vector<triple_names> all_triple_names() { return selection::all_triple_names<tool_triples>(); }

/// The choices of the command lines' --a2a, --quant and --kernel.
inline std::vector<std::string> axis_names(std::string_view triple_names::*axis) {
  return selection::axis_names<tool_triples>(axis);
}

/// `--kernel auto` (selection::auto_kernel over the tool's table).
inline std::string_view auto_kernel(std::string_view a2a, std::string_view quant) {
  return selection::auto_kernel<tool_triples>(a2a, quant);
}

/// The variant alternative for the named triple; polymoe::error listing valid choices otherwise.
inline triple_variant select_triple(std::string_view a2a, std::string_view quant, std::string_view kernel) {
  return selection::select_triple<tool_triples>(a2a, quant, kernel, tool_labels);
}

using selection::names_of;

}  // namespace polymoe::cli
