#pragma once
// The definition of run_part<P>; included only by run_part.cpp.
#include <algorithm>
#include <chrono>
#include <optional>
#include <type_traits>

#include "run_layer.hpp"

namespace polymoe::cli {

/// The dispatcher: mpi_masked gets a capacity that no batch can exceed (every slot of every token
/// on one expert) unless --capacity says otherwise; nccl_masked blocks of a rank's share of the
/// tokens (fp32 rows, as the layer's host conveniences pass them) and its default capacity, which
/// no routing exceeds, unless --capacity says otherwise.
template <class A2A>
A2A make_dispatcher(const run_context& ctx) {
#if defined(POLYMOE_WITH_NCCL)
  if constexpr (std::is_same_v<A2A, a2a::nccl_masked>)
    return A2A(std::max<index_t>(1, (ctx.total_tokens + ctx.ranks - 1) / ctx.ranks), ctx.capacity, element_type::f32);
  else
#endif
  if constexpr (std::is_constructible_v<A2A, index_t>)
    return A2A(ctx.capacity > 0 ? ctx.capacity : std::max<index_t>(1, ctx.total_tokens * ctx.cfg.top_k()));
  else
    return A2A{};
}

/// The kernel: one that carries a tuning (kernel::tiled, kernel::tiled_amx) gets --tuning's;
/// --tuning with any other kernel is an error.
template <class Kernel>
Kernel make_kernel(const run_context& ctx) {
  Kernel k{};
  if constexpr (requires { k.tuning = ctx.tuning; })
    k.tuning = ctx.tuning;
  else
    require(!ctx.tuning_given, "run: --tuning sets the tiled kernels' tuning; --kernel ", Kernel::name, " has none");
  return k;
}

/// A dispatcher between GPUs runs one GPU a rank: this rank's own among its host's (an agreed step,
/// so that a host with fewer GPUs than ranks is every rank's error).
template <class A2A>
void use_the_ranks_gpu([[maybe_unused]] const run_context& ctx) {
#if defined(POLYMOE_WITH_NCCL)
  if constexpr (std::is_base_of_v<a2a::detail::nccl_base, A2A>) {
    a2a::detail::mpi_base world(MPI_COMM_WORLD);
    detail::agree_on(world, [&] {
      const int gpus = cuda::device_count();
      require(gpus >= ctx.host_ranks, "run: --a2a ", A2A::name, " runs one GPU a rank: ", ctx.host_ranks,
              " ranks on this host need a GPU each; it has ", gpus);
      cuda::set_current_device(ctx.host_rank);
    });
  }
#endif
}

template <class A2A, class Q, class Kernel>
void run_triple(run_context& ctx) {
  using clock = std::chrono::steady_clock;
  use_the_ranks_gpu<A2A>(ctx);
  const Kernel kernel = make_kernel<Kernel>(ctx);
  const auto t0 = clock::now();
  std::optional<tool_layer<A2A, Q, Kernel>> layer;
  std::optional<progress> preparing(std::in_place, ctx.shown_progress,
                                    detail::concat("run: preparing the experts (", Q::name, ", ", Kernel::name, ")"));
  ctx.note = io::emplace_layer(layer, ctx.cfg, ctx.weights, make_dispatcher<A2A>(ctx), kernel);
  preparing.reset();  // its last line before what follows
  const auto t1 = clock::now();
  // With --repeat > 1 the mean is of warm calls: one untimed call first (first touch of the
  // layer's buffers, thread start-up).
  if (ctx.repeat > 1) ctx.out = layer->forward(ctx.hidden, ctx.logits);
  const auto t_warm = clock::now();
  for (int r = 0; r < ctx.repeat; ++r) ctx.out = layer->forward(ctx.hidden, ctx.logits);
  const auto t2 = clock::now();
  if constexpr (requires { layer->last_topk_ids(); }) {
    ctx.topk_ids = layer->last_topk_ids();
    ctx.topk_weights = layer->last_topk_weights();
  } else {
    ctx.topk_ids = layer->last_routing().ids;
    ctx.topk_weights = layer->last_routing().weights;
  }
  if constexpr (requires { layer->describe(); }) ctx.runs = layer->describe();
  ctx.prepare_seconds = std::chrono::duration<double>(t1 - t0).count();
  ctx.forward_seconds = std::chrono::duration<double>(t2 - t_warm).count() / ctx.repeat;
}

template <std::size_t P>
void run_part(const triple_variant& selected, run_context& ctx) {
  std::visit(
      [&](auto t) {
        using T = decltype(t);
        if constexpr (part_of<T> == P)
          run_triple<typename T::a2a, typename T::quant, typename T::kernel>(ctx);
        else
          throw error("run_part: the selected triple is not this part's");
      },
      selected);
}

}  // namespace polymoe::cli
