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
struct fp8;
struct fp8_block;
struct fp8_block_weight_only;
struct int8_w8a8;
struct mxfp4;
struct mxfp4_w4a16;
struct nvfp4;
struct nvfp4_w4a4;
struct nvfp4_w4a16;
}
namespace kernel {
struct reference;
struct tbb_grouped;
struct tiled;
struct tiled_amx;
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
      , a2a::mpi_allgather  // standard: all-gather tokens, per-slot rows back to the owner
      , a2a::mpi_ragged     // ragged: DeepEP normal mode over MPI_Alltoallv
      , a2a::mpi_masked     // masked: DeepEP low-latency mode, fixed capacity per local expert
#endif
      >;

  using quants = list<
      quant::fp32,                    // fp32 weights, fp32 activations
      quant::bf16,                    // bf16 weights and activations, fp32 accumulation
      quant::fp8,                     // E4M3 weights (per-expert scale), E4M3 per-token activations
      quant::fp8_block,               // DeepSeek-V3: E4M3 128x128 weight blocks, activations per token in groups of 128
      quant::fp8_block_weight_only,   // the same weights, fp32 activations
      quant::int8_w8a8,               // int8 per-channel weights, int8 per-token activations
      quant::mxfp4,                   // MXFP4 weights (GPT-OSS layout), fp32 activations
      quant::mxfp4_w4a16,             // the same weights, bf16 activations
      quant::nvfp4,                   // NVFP4 weights (ModelOpt), fp32 activations
      quant::nvfp4_w4a4,              // NVFP4 weights and per-token NVFP4 activations
      quant::nvfp4_w4a16>;            // NVFP4 weights, bf16 activations

  using kernels = list<
      pairing::kernel_row<kernel::reference,   pairing::natives<F_standard, F_masked>, pairing::every_scheme>,
      pairing::kernel_row<kernel::tbb_grouped, pairing::natives<F_standard>,           pairing::schemes<quant::fp32, quant::bf16,
          quant::fp8, quant::fp8_block, quant::fp8_block_weight_only, quant::int8_w8a8, quant::mxfp4,
          quant::mxfp4_w4a16, quant::nvfp4, quant::nvfp4_w4a4, quant::nvfp4_w4a16>>,
      pairing::kernel_row<kernel::tiled,       pairing::natives<F_standard>,
                          pairing::schemes<quant::fp32, quant::bf16, quant::fp8, quant::fp8_block,
                                           quant::fp8_block_weight_only, quant::int8_w8a8, quant::mxfp4,
                                           quant::mxfp4_w4a16, quant::nvfp4, quant::nvfp4_w4a4,
                                           quant::nvfp4_w4a16>>,
      pairing::kernel_row<kernel::tiled_amx,   pairing::natives<F_standard>,
                          pairing::schemes<quant::bf16, quant::fp8, quant::fp8_block, quant::fp8_block_weight_only,
                                           quant::int8_w8a8, quant::mxfp4, quant::mxfp4_w4a16, quant::nvfp4,
                                           quant::nvfp4_w4a4, quant::nvfp4_w4a16>>>;

  using adapters = list<
      pairing::adapter_row<F_ragged, F_standard>,   // a ragged batch is a standard one with counts
      pairing::adapter_row<F_masked, F_standard>,   // valid rows as tokens with k = 1, padding rows id -1
      pairing::adapter_row<F_standard, F_masked>>;  // sort by expert into padded rows, weighted sum back

  using fused = list<>;
};

}  // namespace polymoe
