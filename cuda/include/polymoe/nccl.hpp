#pragma once
// Umbrella header of the NCCL component (link polymoe::nccl): the core, kernel::cuda, and the
// dispatchers that carry CUDA memory between GPUs with their table, the CUDA table with their
// rows. Including it does not change the CUDA table: a layer of these dispatchers is a layer of
// this table, polymoe::NcclMoeLayer<A2A, Quant, Kernel>. They carry CUDA memory only: with a
// kernel that computes in host memory, a triple is one compile error naming both spaces.
#include <polymoe/a2a/nccl_masked.hpp>
#include <polymoe/a2a/nccl_ragged.hpp>
#include <polymoe/cuda_table.hpp>
#include <polymoe/polymoe.hpp>

namespace polymoe {

namespace table_rows {
/// The NCCL dispatchers' rows, for tables that add them to others (pairing::join; the tool's).
struct nccl_dispatchers : pairing::table<pairing::dispatcher_row<a2a::nccl_ragged>,   // DeepEP normal mode
                                         pairing::dispatcher_row<a2a::nccl_masked>> {};  // DeepEP low-latency
}  // namespace table_rows

struct nccl_table : pairing::join<cuda_table, table_rows::nccl_dispatchers> {};

/// A layer of the NCCL table (its other triples are the CUDA table's, the same instances).
template <class A2A, class Quant, class Kernel>
using NcclMoeLayer = basic_moe_layer<nccl_table, A2A, Quant, Kernel>;

}  // namespace polymoe
