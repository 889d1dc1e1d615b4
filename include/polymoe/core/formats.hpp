#pragma once
// Dispatch formats: what a dispatcher hands to the expert kernel, and what the kernel hands back
// to the combine. Formats are tags; DispatchOutput<F> / CombineInput<F> are non-owning views whose
// buffers belong to the dispatcher (or an adapter), so running a pipeline allocates nothing itself.
//
//   standard  tokens [N, H] with local expert ids [N, k] (-1: not computed here) and weights [N, k];
//             the kernel writes the weighted, fp32-summed expert outputs [N, H].
//   ragged    DeepEP "normal": as standard (the rows this rank received), plus per-local-expert counts.
//   masked    DeepEP "low-latency": per-local-expert padded rows [E_local·capacity, H] and masked_m,
//             the number of valid rows of each expert; the kernel writes each valid row's own
//             (unweighted) expert output; padding rows are left as they are.
//
// DispatchOutput<F, Space> / CombineInput<F, Space>: the views are Eigen's in host memory (the
// default space) and device_view's, with the stream the work is queued on, in space::cuda.
#include <span>
#include <string_view>
#include <type_traits>

#include <polymoe/core/activation.hpp>
#include <polymoe/core/device_view.hpp>
#include <polymoe/core/memory_space.hpp>
#include <polymoe/core/types.hpp>

namespace polymoe {

namespace format {
struct standard { static constexpr std::string_view name = "standard"; };
struct ragged { static constexpr std::string_view name = "ragged"; };
struct masked { static constexpr std::string_view name = "masked"; };
}  // namespace format

template <class F>
inline constexpr bool is_dispatch_format_v =
    std::is_same_v<F, format::standard> || std::is_same_v<F, format::ragged> || std::is_same_v<F, format::masked>;

template <class F, class Space = space::host>
struct DispatchOutput;
template <class F, class Space = space::host>
struct CombineInput;

template <>
struct DispatchOutput<format::standard> {
  MatrixCRef hidden;    ///< [N, H]
  IdMatrixCRef ids;     ///< [N, k] local expert ids in [0, num_experts) or -1
  MatrixCRef weights;   ///< [N, k] fp32 routing weights (already scaled)
  index_t num_experts;  ///< local experts
};

template <>
struct DispatchOutput<format::ragged> : DispatchOutput<format::standard> {
  std::span<const index_t> counts;  ///< [num_experts] rows routed to each local expert
};

template <>
struct DispatchOutput<format::masked> {
  MatrixCRef hidden;                  ///< [num_experts·capacity, H]
  std::span<const index_t> masked_m;  ///< [num_experts] valid rows per expert
  index_t capacity;
  index_t num_experts;
};

template <>
struct CombineInput<format::standard> {
  MatrixRef out;  ///< [N, H]: sum over k of weight · expert(x)
};
template <>
struct CombineInput<format::ragged> : CombineInput<format::standard> {};
template <>
struct CombineInput<format::masked> {
  MatrixRef out;  ///< [num_experts·capacity, H]: expert(x) of each valid row, unweighted
};

template <>
struct DispatchOutput<format::standard, space::cuda> {
  device_view hidden;   ///< [N, H] float32 or bfloat16
  device_view ids;      ///< [N, k] int32 local expert ids in [0, num_experts) or -1
  device_view weights;  ///< [N, k] float32 routing weights (already scaled)
  index_t num_experts;  ///< local experts
  cuda_stream stream;   ///< where the work is queued
};
template <>
struct CombineInput<format::standard, space::cuda> {
  device_view out;          ///< [N, H] float32
  cuda_stream stream;
  bool accumulate = false;  ///< add to out instead of writing it (a layer's shared expert)
};

template <>
struct DispatchOutput<format::ragged, space::cuda> : DispatchOutput<format::standard, space::cuda> {
  std::span<const index_t> counts;  ///< [num_experts] rows routed to each local expert (host memory)
};
/// The kernel writes each (row, slot)'s own weighted output to row pair_rows[row, slot] of out
/// (float32) instead of each row's sum: the dispatcher returns every slot to its token's rank,
/// which sums them in slot order.
template <>
struct CombineInput<format::ragged, space::cuda> : CombineInput<format::standard, space::cuda> {
  device_view pair_rows;  ///< [N, k] int32, packed
};

template <>
struct DispatchOutput<format::masked, space::cuda> {
  device_view hidden;    ///< [num_experts·capacity, H] float32 or bfloat16
  device_view masked_m;  ///< [num_experts] int32 valid rows per expert
  index_t capacity;
  index_t num_experts;
  cuda_stream stream;
  /// The valid rows of all experts together the dispatcher expects (a hint for the kernel's tile
  /// shape; 0: experts · capacity).
  index_t expected_rows = 0;
  /// The most valid rows of all experts together, when the dispatcher bounds them below experts ·
  /// capacity (the kernel sizes its grids for them). 0: experts · capacity.
  index_t max_rows = 0;
};
template <>
struct CombineInput<format::masked, space::cuda> {
  device_view out;  ///< [num_experts·capacity, H] float32: each valid row's unweighted expert output
  cuda_stream stream;
};

/// What every expert of a layer computes besides its weights.
struct ExpertMlp {
  ActivationParams activation;
  bool weight_on_input = false;  ///< multiply x by the routing weight instead of the output (top_k == 1)
};

}  // namespace polymoe
