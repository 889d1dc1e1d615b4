// ko: kernel::cuda (CUDA memory) under an MPI dispatcher (host memory), in a table that holds
// both: one error naming both spaces and the dispatchers that carry CUDA memory. The real policies;
// no CUDA compiler is needed, the table alone decides.
#include <polymoe/cuda_table.hpp>
#include <polymoe/mpi.hpp>

struct gpu_mpi_table : polymoe::pairing::extend<polymoe::mpi_table, polymoe::table_rows::cuda_kernel> {};
static_assert(polymoe::can_make_layer_in<gpu_mpi_table, polymoe::a2a::local, polymoe::quant::bf16, polymoe::kernel::cuda>);
static_assert(!polymoe::can_make_layer_in<gpu_mpi_table, polymoe::a2a::mpi_ragged, polymoe::quant::bf16, polymoe::kernel::cuda>);
#ifdef POLYMOE_KO
using Kernel = polymoe::kernel::cuda;
#else
using Kernel = polymoe::kernel::reference;
#endif
void use(const polymoe::MoeConfig& cfg, const polymoe::MoeWeights& w, const polymoe::Matrix& h, const polymoe::Matrix& l) {
  polymoe::basic_moe_layer<gpu_mpi_table, polymoe::a2a::mpi_ragged, polymoe::quant::bf16, Kernel> layer(cfg, w);
  (void)layer.forward(h, l);
}
