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
/// rows' element bytes, k (those two the same from every rank, or the exchange is refused), where
/// the peer's slot rows start among the rows that come back to this rank, this rank's tokens, and
/// ep_geometry::backs.
inline constexpr int ep_count_fields = 7;

struct ep_geometry {
  int ranks = 1, local_experts = 1, k = 1;
  int hidden = 0;
  int elem_bytes = 4;         ///< of the rows on the wire: 4 fp32, 2 bf16
  long long row_bytes = 0;    ///< a row, padded to 16 bytes
  int backs = 0;              ///< the direct combine: how many buffers of returned rows this rank has had
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

/// This rank's own slot rows: rows [lo, hi) of the returned rows are rows [lo + shift, hi + shift)
/// of the kernel's results (fp32 [slots, H] packed).
struct ep_own_rows {
  const float* results = nullptr;
  long long lo = 0, hi = 0, shift = 0;
};

/// out [T, H] (fp32, or bf16 bits when out_bf16; row t at t · ld_out) = Σ_j back[pos_of_pair[t · k + j]]
/// in slot order from 0 (back fp32 [slots, H] packed; the own rows, where given, from the
/// results); a token with no slot computed gets 0.
cudaError_t launch_ep_sum(const ep_geometry& g, const float* back, const ep_own_rows& own, const int* pos_of_pair,
                          int tokens, void* out, long long ld_out, bool out_bf16, cudaStream_t stream);

// The direct combine (every rank on one host): each rank's flags [ranks + 1] ints, mapped into the
// others (CUDA IPC): [s] the last combine whose rows rank s has written into this rank's returned
// rows, [ranks] the last combine this rank has summed (its returned rows free again). flags_of
// [ranks]: each rank's flags, this rank's own at [rank].

/// Waits, on `stream`, until for every rank r but this one flags_of[r][at] >= target (at >= 0:
/// each peer's own word), or flags_of[rank][r] >= target (at < 0: the word each peer writes
/// here). A peer that never comes traps after 30 s: a device error, not a hang.
cudaError_t launch_ep_wait(int* const* flags_of, int ranks, int rank, int at, int target, cudaStream_t stream);
/// After the work queued on `stream` so far: flags_of[rank][at] = value (at >= 0), or
/// flags_of[r][rank] = value on every other rank r (at < 0).
cudaError_t launch_ep_set(int* const* flags_of, int ranks, int rank, int at, int value, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// The masked exchange (DeepEP's low-latency mode): blocks of a fixed size, so that no launch or
// NCCL call of a forward waits for the device. Every rank sends each rank max_tokens records,
// record t being token t (its row when it has a slot there, and its k local ids there, -1 for the
// others: every id -1 for a token without one, or past the batch). The receiver places each
// received slot in its expert's rows of the masked buffer, in (source, token, slot) order, and
// returns its result at row t · k + i of the source's block, i counting the token's slots there in
// slot order; with it a status word, the largest rows an expert of the receiver was sent when
// that is beyond its capacity (0 otherwise).

struct ep_masked_geometry {
  int ranks = 1, local_experts = 1, k = 1, hidden = 0;
  int max_tokens = 1, capacity = 1;
  int elem_bytes = 2;       ///< of the rows on the wire and in the masked buffer: 4 fp32, 2 bf16
  long long row_bytes = 0;  ///< a row, padded to 16 bytes
};

/// The masked exchange's device arrays (R = ranks · max_tokens records).
struct ep_masked_view {
  unsigned char* send_rows = nullptr;  ///< [R] rows, block d for rank d
  std::int32_t* send_ids = nullptr;    ///< [R · k]
  unsigned char* recv_rows = nullptr;  ///< [R] rows, block s from rank s
  std::int32_t* recv_ids = nullptr;    ///< [R · k]
  int* place = nullptr;                ///< [R · k] the masked row of each received slot, -1 none (or beyond capacity)
  unsigned char* masked = nullptr;     ///< [El · capacity] rows, row_bytes apart
  int* masked_m = nullptr;             ///< [El]
  int* status = nullptr;               ///< [1] as the returned status word
  const float* results = nullptr;      ///< [El · capacity, H] the kernel's fp32 rows
  float* ret = nullptr;                ///< [R · k, H] block s for rank s
  int* ret_status = nullptr;           ///< [4 · ranks] the status word at 4 · s
  const float* back = nullptr;         ///< [R · k, H] block d from rank d
  const int* back_status = nullptr;    ///< [4 · ranks]
  int* pos_of_pair = nullptr;          ///< [max_tokens · k] the row of back of each (token, slot), -1 none
  float* w_of_pair = nullptr;          ///< [max_tokens · k] its routing weight
  int* totals = nullptr;               ///< [2] forwards that overflowed an expert anywhere, the largest rows
};

/// The records of `tokens` rows of hidden (ids global, as in the ragged plan), every rank's
/// block; pos_of_pair and w_of_pair.
cudaError_t launch_mk_pack(const ep_masked_geometry& g, const void* hidden, long long ld_hidden,
                           const std::int32_t* ids, const float* weights, int tokens, const ep_masked_view& v,
                           cudaStream_t stream);
/// The received records into the masked buffer and masked_m; the status word.
cudaError_t launch_mk_place(const ep_masked_geometry& g, const ep_masked_view& v, cudaStream_t stream);
/// The kernel's results into the blocks returned, with the status word.
cudaError_t launch_mk_gather(const ep_masked_geometry& g, const ep_masked_view& v, cudaStream_t stream);
/// out [T, H] = Σ_j weight · back row of (t, j) in slot order, fp32 from 0 (NaN everywhere when a
/// returned status word is set); totals.
cudaError_t launch_mk_sum(const ep_masked_geometry& g, const ep_masked_view& v, int tokens, void* out,
                          long long ld_out, bool out_bf16, cudaStream_t stream);

}  // namespace polymoe::cuda::detail
