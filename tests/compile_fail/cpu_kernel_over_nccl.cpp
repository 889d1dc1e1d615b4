// ko: a CPU kernel (host memory) under a2a::nccl_ragged (CUDA memory), in the NCCL table: one error
// naming both spaces and the dispatchers that carry host memory. The real policies; neither a CUDA
// compiler nor NCCL is needed, the table alone decides.
#include <polymoe/nccl.hpp>

static_assert(polymoe::can_make_layer_in<polymoe::nccl_table, polymoe::a2a::nccl_ragged, polymoe::quant::bf16,
                                         polymoe::kernel::cuda>);
static_assert(!polymoe::can_make_layer_in<polymoe::nccl_table, polymoe::a2a::nccl_ragged, polymoe::quant::bf16,
                                          polymoe::kernel::tiled>);
static_assert(polymoe::can_make_layer_in<polymoe::nccl_table, polymoe::a2a::nccl_masked, polymoe::quant::fp8_block,
                                         polymoe::kernel::cuda>);
static_assert(!polymoe::can_make_layer_in<polymoe::nccl_table, polymoe::a2a::nccl_masked, polymoe::quant::bf16,
                                          polymoe::kernel::reference>);
#ifdef POLYMOE_KO
using Layer = polymoe::NcclMoeLayer<polymoe::a2a::nccl_ragged, polymoe::quant::bf16, polymoe::kernel::tiled>;
#else
using Layer = polymoe::NcclMoeLayer<polymoe::a2a::local, polymoe::quant::bf16, polymoe::kernel::tiled>;
#endif
void use(const polymoe::MoeConfig& cfg, const polymoe::MoeWeights& w, const polymoe::Matrix& h, const polymoe::Matrix& l) {
  Layer layer(cfg, w);
  (void)layer.forward(h, l);
}
