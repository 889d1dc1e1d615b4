#pragma once
// `polymoe run`: what the layer runner gets and gives back. run_with_quant<Q> is defined in
// run_layer_impl.hpp and explicitly instantiated in run_q_<scheme>.cpp, one file per quant scheme
// (a scheme added to the pairing table needs its file, else the link fails naming it), so no
// translation unit instantiates every layer.
#include <string>

#include <polymoe/io/hf_checkpoint.hpp>

#include "selection.hpp"

namespace polymoe::cli {

struct run_context {
  MoeConfig cfg;
  io::hf_layer::weights_variant weights;
  Matrix hidden;  ///< this rank's tokens [T_local, H]
  Matrix logits;  ///< their router logits [T_local, E]
  int repeat = 1; ///< forward passes (timing); the output is the last one's
  index_t total_tokens = 0;  ///< over all ranks
  index_t capacity = 0;      ///< mpi_masked rows per local expert (0: total_tokens * top_k)
  // results
  Matrix out;
  IdMatrix topk_ids;
  Matrix topk_weights;
  double prepare_seconds = 0.0, forward_seconds = 0.0;
  std::string note;  ///< e.g. how the weights were brought into the scheme's form
};

/// Builds MoeLayer<A2A, Q, Kernel> for the selected alternative (whose quant must be Q) and runs it.
template <class Q>
void run_with_quant(const triple_variant& selected, run_context& ctx);

}  // namespace polymoe::cli
