#pragma once
#include <string_view>

#include <boost/mp11/list.hpp>

#include <polymoe/core/config.hpp>
#include <polymoe/core/memory_space.hpp>
#include <polymoe/core/roles.hpp>

namespace polymoe::a2a {

/// No communication: the tokens stay where they are, in the standard format, and the kernel
/// writes straight into the layer's output (dispatch and combine compile to nothing).
struct local {
  using a2a_concept = a2a_tag;
  using format = format::standard;
  /// Nothing moves, so the tokens may live wherever the kernel computes.
  using memory_spaces = boost::mp11::mp_list<space::host, space::cuda>;
  static constexpr std::string_view name = "local";

  static void configure(const MoeConfig& cfg) {
    require(cfg.ep_size == 1, "a2a::local runs on one rank, but MoeConfig.ep_size=", cfg.ep_size,
            "; expert parallelism needs an mpi_* dispatcher");
  }
  DispatchOutput<format> dispatch(const MatrixCRef& hidden, const IdMatrixCRef& ids, const MatrixCRef& weights,
                                  const MoeConfig& cfg) const {
    return DispatchOutput<format>{hidden, ids, weights, cfg.local_experts()};
  }
  CombineInput<format> combine_input(const DispatchOutput<format>&, MatrixRef out) const { return {out}; }
  void combine(const CombineInput<format>&, MatrixRef) const noexcept {}

  // The same in CUDA memory: views of the caller's buffers and the stream, nothing queued.
  DispatchOutput<format, space::cuda> dispatch(const device_view& hidden, const device_view& ids,
                                               const device_view& weights, const MoeConfig& cfg,
                                               cuda_stream stream) const {
    return {hidden, ids, weights, cfg.local_experts(), stream};
  }
  CombineInput<format, space::cuda> combine_input(const DispatchOutput<format, space::cuda>& d,
                                                  const device_view& out) const {
    return {out, d.stream};
  }
  void combine(const CombineInput<format, space::cuda>&, const device_view&) const noexcept {}
};

}  // namespace polymoe::a2a
