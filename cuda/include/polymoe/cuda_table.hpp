#pragma once
// The CUDA component's pairing table: the core table and kernel::cuda, the routed experts on an
// NVIDIA GPU (CMake target polymoe::cuda). Including it does not change the core table: a layer of
// this kernel is a layer of this table, polymoe::CudaMoeLayer<A2A, Quant, Kernel>. kernel::cuda
// computes in CUDA memory: it pairs with the dispatchers that carry it (a2a::local), and a
// dispatcher that does not (the MPI ones, host memory) is one compile error naming both spaces.
// The dispatchers that carry CUDA memory between GPUs are in polymoe::nccl_table (<polymoe/nccl.hpp>).
#include <polymoe/cuda/layer.hpp>
#include <polymoe/kernel/cuda.hpp>
#include <polymoe/pairing_table.hpp>

namespace polymoe {

namespace table_rows {
/// kernel::cuda's row, for tables that add it to others (e.g. pairing::extend<mpi_table, cuda_kernel>).
// bf16 mma.sync on the device; the W4A16 schemes' 4-bit weights are decoded to bf16 in registers;
// the fp8 schemes run E4M3 x E4M3 on the fp8 tensor cores
using cuda_kernel =
    pairing::kernel_row<kernel::cuda, pairing::natives<format::standard, format::ragged, format::masked>,
                        pairing::schemes<quant::bf16, quant::mxfp4_w4a16, quant::nvfp4_w4a16, quant::fp8_block,
                                         quant::fp8>>;
}  // namespace table_rows

struct cuda_table : pairing::extend<core_table, table_rows::cuda_kernel> {};

/// A layer of the CUDA table (its host triples are the core table's, the same instances).
template <class A2A, class Quant, class Kernel>
using CudaMoeLayer = basic_moe_layer<cuda_table, A2A, Quant, Kernel>;

}  // namespace polymoe
