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

struct nccl_table : pairing::extend<cuda_table,
                                    pairing::dispatcher_row<a2a::nccl_ragged>,   // ragged: DeepEP normal mode
                                    pairing::dispatcher_row<a2a::nccl_masked>> {};  // masked: DeepEP low-latency

/// A layer of the NCCL table (its other triples are the CUDA table's, the same instances).
template <class A2A, class Quant, class Kernel>
using NcclMoeLayer = basic_moe_layer<nccl_table, A2A, Quant, Kernel>;

}  // namespace polymoe
