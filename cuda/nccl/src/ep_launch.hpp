#pragma once
// What the host side of the expert-parallel exchange (ep_exchange.cpp) and its kernels (ep.cu)
// share: plain structs and launch functions, nothing of Eigen or the core headers.
//
// The plan of one rank's T tokens over S ranks of El local experts each (global id = rank · El +
// local id; an id outside [0, S · El) is a slot not computed). A "record" is one token bound for
// one rank that owns at least one of its slots: ordered by destination, then token. Its slots
// there are "slot rows", ordered the same way and then by slot; they come back in that order.
//
// A record travels in four arrays, each in record order, so that the receiver's are the kernel's
// input as they arrive: the token's row as it came (fp32 or bf16, row_bytes apart, a multiple of
// 16), its k local ids there (int32, -1 for the slots not served there), its k routing weights
// (fp32), and the index of its first slot row within its destination's block (int32).
#include <cstdint>

#include <cuda_runtime_api.h>

namespace polymoe::cuda::detail {

/// The fields before the expert counts in a rank's counts for one peer: records, slot rows, the
/// rows' element bytes, k (the last two the same from every rank, or the exchange is refused).
inline constexpr int ep_count_fields = 4;

struct ep_geometry {
  int ranks = 1, local_experts = 1, k = 1;
  int hidden = 0;
  int elem_bytes = 4;         ///< of the rows on the wire: 4 fp32, 2 bf16
  long long row_bytes = 0;    ///< a row, padded to 16 bytes
};

/// The plan's device arrays (T tokens).
struct ep_plan_view {
  int* rec_pos = nullptr;        ///< [S · T + 1] per (destination, token): 1 when a record, then its index (exclusive scan); [S · T] = records
  int* slot_pos = nullptr;       ///< [S · T + 1] the same for slot rows
  int* expert_counts = nullptr;  ///< [S · El] slot rows per (destination, local expert)
  int* send_counts = nullptr;    ///< [S · (ep_count_fields + El)] per destination: records, slot rows, the
                                 ///< rows' element bytes, k, El expert counts
  int* pos_of_pair = nullptr;    ///< [T · k] the slot row of each (token, slot) in the returned rows, -1 none
};

/// Counts and scans the plan of ids [T, k] (zeroes expert_counts itself), then fills send_counts.
cudaError_t launch_ep_plan(const ep_geometry& g, const std::int32_t* ids, int tokens, const ep_plan_view& p,
                           cudaStream_t stream);

/// A block of records: rows [n, row_bytes], ids and weights [n, k], first slot rows [n].
struct ep_records {
  unsigned char* rows = nullptr;
  std::int32_t* ids = nullptr;
  float* weights = nullptr;
  std::int32_t* first = nullptr;
};

/// The records of `tokens` rows of hidden (row t at t · ld_hidden elements) into send (rec_pos
/// from the plan gives each its place), and pos_of_pair.
cudaError_t launch_ep_pack(const ep_geometry& g, const void* hidden, long long ld_hidden, const std::int32_t* ids,
                           const float* weights, int tokens, const ep_plan_view& p, const ep_records& send,
                           cudaStream_t stream);

/// Offsets of the received blocks: recv_counts (as send_counts, from each source)
/// into rec_off [S + 1] and slot_off [S + 1].
cudaError_t launch_ep_offsets(const ep_geometry& g, const int* recv_counts, int* rec_off, int* slot_off,
                              cudaStream_t stream);

/// pair_rows [records, k]: the slot row, in (source, record, slot) order, of each slot a received
/// record has here (-1 for the others).
cudaError_t launch_ep_pair_rows(const ep_geometry& g, const ep_records& recv, int records, const int* rec_off,
                                const int* slot_off, std::int32_t* pair_rows, cudaStream_t stream);

/// out [T, H] (fp32, or bf16 bits when out_bf16; row t at t · ld_out) = Σ_j back[pos_of_pair[t · k + j]]
/// in slot order from 0 (back fp32 [slots, H] packed); a token with no slot computed gets 0.
cudaError_t launch_ep_sum(const ep_geometry& g, const float* back, const int* pos_of_pair, int tokens, void* out,
                          long long ld_out, bool out_bf16, cudaStream_t stream);

}  // namespace polymoe::cuda::detail
