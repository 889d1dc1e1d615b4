#pragma once
// `polymoe run`: what the layer runner gets and gives back. run_part<P> is defined in
// run_layer_impl.hpp and explicitly instantiated in run_part.cpp, which CMake compiles once per
// part: part P holds the layers of the (scheme, kernel) pairs whose index in the table is P modulo
// run_parts, so no translation unit instantiates every layer and the parts build in parallel.
#include <cstddef>
#include <string>

#include <polymoe/io/hf_checkpoint.hpp>
#include <polymoe/kernels/tiled/tuning.hpp>

#include "progress.hpp"
#include "selection.hpp"

namespace polymoe::cli {

struct run_context {
  MoeConfig cfg;
  io::hf_layer::weights_variant weights;
  Matrix hidden;  ///< this rank's tokens [T_local, H]
  Matrix logits;  ///< their router logits [T_local, E]
  int repeat = 1; ///< forward passes (timing); the output is the last one's
  index_t total_tokens = 0;  ///< over all ranks
  int ranks = 1;             ///< the processes the tokens are shared by
  int host_rank = 0, host_ranks = 1;  ///< this process among those on its host (one GPU each)
  index_t capacity = 0;      ///< mpi_masked and nccl_masked rows per local expert (0: the default)
  kernels::tiled::tuning tuning;  ///< --tuning: the tiled kernels' (kernels without one refuse it)
  bool tuning_given = false;      ///< whether --tuning was given
  progress::mode shown_progress = progress::mode::off;  ///< progress of the long steps on stderr
  // results
  Matrix out;
  IdMatrix topk_ids;
  Matrix topk_weights;
  double prepare_seconds = 0.0, forward_seconds = 0.0;
  std::string note;  ///< e.g. how the weights were brought into the scheme's form
  std::string runs;  ///< what the layer runs here (MoeLayer::describe)
};

/// The number of translation units the layers are split over (the build's POLYMOE_CLI_PARTS).
inline constexpr std::size_t run_parts = POLYMOE_CLI_PARTS;

/// The part that instantiates triple T (a triple_tag): its (scheme, kernel) pair's index.
template <class T>
inline constexpr std::size_t part_of =
    (boost::mp11::mp_find<pairing::quants_of<tool_table>, typename T::quant>::value *
         boost::mp11::mp_size<pairing::kernels_of<tool_table>>::value +
     boost::mp11::mp_find<pairing::kernels_of<tool_table>, typename T::kernel>::value) %
    run_parts;

/// Builds the layer of the selected alternative (whose part must be P) and runs it.
template <std::size_t P>
void run_part(const triple_variant& selected, run_context& ctx);

/// Runs the selected triple, in the part that instantiates it.
inline void run_selected(const triple_variant& selected, run_context& ctx) {
  std::visit(
      [&](auto t) {
        boost::mp11::mp_with_index<run_parts>(part_of<decltype(t)>, [&](auto P) { run_part<P>(selected, ctx); });
      },
      selected);
}

}  // namespace polymoe::cli
