#pragma once
// polymoe::cuda's expert-parallel exchange over NCCL (CMake target polymoe::nccl): a rank's tokens
// carried in CUDA memory to the ranks that own their experts, and each slot's result carried
// back, as the NCCL dispatchers (<polymoe/a2a/nccl_ragged.hpp>) run it. Needs no CUDA or NCCL
// header.
//
// Dispatch (DeepEP's normal mode): a token travels once to each rank that owns one of its slots,
// as a record [its slots' local ids there (-1 for the others)][their routing weights][its row as
// it came, fp32 or bf16: the kernel's own rounding or quantization of a received row is then that
// of the row itself]; the counts travel first (the host waits for them: it sizes the rows' exchange),
// then the records, as one group of ncclSend/ncclRecv, into arrays the kernel reads as they are.
//
// Combine: the kernel writes each slot's own result (its weighted output, cuda::routed_call's
// pair_rows) to a row of results(), in (source rank, record, slot) order; each goes back to the
// token's rank, which sums a token's slots in slot order from zero, as one device's top-k sum
// does: with a kernel whose rows do not depend on the rows batched with them, the routed sum is
// bitwise the single-device one.
#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <polymoe/core/device_view.hpp>
#include <polymoe/core/types.hpp>
#include <polymoe/cuda/experts.hpp>

namespace polymoe::cuda {

/// An NCCL communicator over the ranks of one expert-parallel group, on the device current at
/// its construction. Shared by the dispatchers of a model's layers.
class nccl_comm {
 public:
  /// NCCL's unique id (ncclUniqueId's 128 bytes): made on one rank, given to the others.
  using unique_id = std::array<char, 128>;
  [[nodiscard]] static unique_id new_id();

  /// Collective over the `size` ranks that pass the same id; on the current device.
  nccl_comm(const unique_id& id, int rank, int size);
  ~nccl_comm();
  nccl_comm(const nccl_comm&) = delete;
  nccl_comm& operator=(const nccl_comm&) = delete;

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  /// The ncclComm_t.
  [[nodiscard]] void* get() const noexcept { return comm_; }

 private:
  void* comm_ = nullptr;
  int rank_ = 0, size_ = 1, device_ = 0;
};

/// A stream of its own (non-blocking, on the current device) beside the caller's, and the order
/// of work between the two: how a dispatcher exchanges one micro-batch while the kernel computes
/// another.
class side_stream {
 public:
  side_stream();
  ~side_stream();
  side_stream(const side_stream&) = delete;
  side_stream& operator=(const side_stream&) = delete;
  [[nodiscard]] stream_t get() const noexcept { return stream_; }
  /// Work queued on `waiter` from now on starts after the work queued on `waited` so far.
  void order(stream_t waited, stream_t waiter);

 private:
  stream_t stream_ = nullptr;
  void* event_ = nullptr;
  int device_ = 0;
};

/// NCCL's version, "2.28.3", or why the library cannot be asked.
[[nodiscard]] std::string nccl_version();

/// One layer's exchange: its buffers (grow-only) and the steps of a forward, in order: plan
/// (collective: the counts), reserve_rows, exchange (collective: the rows), the kernel on the
/// received tokens into results(), combine (collective: the results).
class ep_exchange {
 public:
  ep_exchange(std::shared_ptr<const nccl_comm> comm, index_t local_experts);
  ~ep_exchange();
  ep_exchange(ep_exchange&&) noexcept;
  ep_exchange& operator=(ep_exchange&&) noexcept;

  /// Grows the plan's buffers for `tokens` tokens of `top_k` slots of `hidden` columns (plan grows
  /// them too; calling this first lets a failure be agreed on before any rank enters the exchange).
  void reserve_plan(index_t tokens, index_t top_k, index_t hidden);

  /// The direct combine, where every rank is on one host and each can map the others' memory:
  /// the expert's rank writes the results with its copy engines straight into the rows of the
  /// token's rank (CUDA IPC; no NCCL and no SM on that path), the ranks ordering it by flags in
  /// each other's memory; for the forwards whose returned fp32 rows make at least `from_bytes` a
  /// rank on average (every rank sees every rank's tokens in the counts: they decide alike), the
  /// others through NCCL. Collective, after every rank has built its exchange; where any rank
  /// cannot map another's memory every rank keeps NCCL's. Returns whether it is on.
  bool connect_direct(std::size_t from_bytes);
  [[nodiscard]] bool direct() const noexcept;
  /// Whether the forward planned last combines directly.
  [[nodiscard]] bool direct_now() const noexcept;

  /// Plans ids [T, k] (int32, packed; global expert ids, one outside [0, ranks · local_experts) a
  /// slot not computed) on `stream`, exchanges the counts and waits for them. `hidden` gives the
  /// rows' width and element type (what the records will carry).
  void plan(const device_view& ids, index_t hidden, element_type rows, stream_t stream);
  /// Grows the buffers the planned exchange needs (polymoe::error when they cannot be had: the
  /// caller agrees on it with the other ranks before exchange).
  void reserve_rows();

  struct received {
    device_view hidden;               ///< [n, H] the received tokens' rows, fp32 or bf16
    device_view ids;                  ///< [n, k] int32 local expert ids, -1 for slots not served here
    device_view weights;              ///< [n, k] float32 routing weights
    std::span<const index_t> counts;  ///< [local experts] slots of each
    device_view pair_rows;            ///< [n, k] int32: the row of results() of each slot served here
  };
  /// Packs hidden's rows (the planned ids, weights [T, k] float32 packed) into records and
  /// exchanges them, on `stream`: the received ones are the kernel's input as they arrive.
  received exchange(const device_view& hidden, const device_view& ids, const device_view& weights, stream_t stream);

  /// [n, H] float32: where the kernel writes each received slot row's result.
  [[nodiscard]] device_view results() const noexcept;
  /// Returns the results to their tokens' ranks and sums each token's slots into out [T, H]
  /// (float32 or bfloat16, any row stride), on `stream`.
  void combine(const device_view& out, stream_t stream);

  /// Bytes this rank sent to other ranks in the last dispatch (records) and combine (fp32 rows).
  [[nodiscard]] std::size_t dispatch_bytes() const noexcept;
  [[nodiscard]] std::size_t combine_bytes() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// One layer's masked exchange (DeepEP's low-latency mode): blocks of a fixed size, allocated when
/// it is made, so that a forward's launches and NCCL calls never wait for the device and a CUDA
/// graph can hold them. Every rank sends each rank max_tokens records (its row where a token has
/// a slot there, and the token's local ids there) and gets back max_tokens · top_k float32 rows;
/// the received slots fill each local expert's `capacity` rows of the masked buffer in (source,
/// token, slot) order. An expert sent more rows than its capacity is not silently short of them:
/// every rank's combine writes NaN, and overflow() counts the forward.
class ep_masked_exchange {
 public:
  struct shape {
    index_t local_experts = 1, top_k = 1, hidden = 1;
    index_t max_tokens = 1;  ///< tokens a rank passes a forward, at most
    index_t capacity = 1;    ///< rows of each local expert, from all ranks together
    element_type rows = element_type::bf16;  ///< of the rows on the wire and in the masked buffer
  };
  /// Allocates every buffer (polymoe::error when they cannot be had), on the communicator's device.
  ep_masked_exchange(std::shared_ptr<const nccl_comm> comm, const shape& s);
  ~ep_masked_exchange();
  ep_masked_exchange(ep_masked_exchange&&) noexcept;
  ep_masked_exchange& operator=(ep_masked_exchange&&) noexcept;

  struct received {
    device_view hidden;    ///< [local experts · capacity, H] the masked rows
    device_view masked_m;  ///< [local experts] int32 valid rows of each
  };
  /// Packs hidden's rows (T <= max_tokens, of the shape's element type; ids [T, k] int32 global
  /// expert ids, one outside [0, ranks · local_experts) a slot not computed; weights [T, k]
  /// float32, packed) and exchanges them on `stream` (collective, fixed sizes).
  received dispatch(const device_view& hidden, const device_view& ids, const device_view& weights, stream_t stream);
  /// [local experts · capacity, H] float32: where the kernel writes each masked row's result.
  [[nodiscard]] device_view results() const noexcept;
  /// Returns the results to their tokens' ranks and sums each token's slots, weighted, into out
  /// [T, H] (float32 or bfloat16, any row stride), on `stream` (collective, fixed sizes).
  void combine(const device_view& out, stream_t stream);

  /// What the host has seen of the device's count (pinned memory the combine writes; exact once
  /// the stream has finished): forwards in which an expert of some rank was sent more rows than
  /// its capacity, and the most rows one was sent.
  struct overflow_count {
    int forwards = 0, largest = 0;
  };
  [[nodiscard]] overflow_count overflow() const noexcept;
  /// overflow() once the device has finished all work queued so far (waits for it).
  [[nodiscard]] overflow_count settle() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace polymoe::cuda
