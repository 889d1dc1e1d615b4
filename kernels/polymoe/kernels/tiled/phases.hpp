#pragma once
// Where a tiled forward spends its time, for benchmarks: wall-clock seconds per phase of the
// pipeline (forward.hpp), summed over forwards. Off unless the kernel was given a sink (the
// `phases` pointer of kernel::tiled and kernel::tiled_amx, handed down to the forward); off, a
// forward pays a branch per phase.
//
//   kernels::tiled::PhaseTimes t;
//   polymoe::kernel::tiled_amx k{{}, &t};  // this kernel's forwards record into t
//   polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::bf16, polymoe::kernel::tiled_amx> layer(cfg, w, {}, k);
//   ... forwards ...
#include <array>
#include <chrono>
#include <cstdint>
#include <string_view>

namespace polymoe::kernels::tiled {

/// Seconds per phase, summed over `forwards` forwards.
struct PhaseTimes {
  enum phase : int {
    sort,    ///< shape checks, sort by expert, routing weight per sorted row
    inputs,  ///< the first GEMM's input rows (rounded, quantized or gathered in sorted order)
    gemm1,   ///< GEMM 1 with its epilogue (bias, activation)
    act,     ///< per-row work between the GEMMs (quantizing the activations)
    gemm2,   ///< GEMM 2 with its epilogue (bias, routing weight)
    gemms,   ///< gemm1, act and gemm2 as one pipeline whose tasks overlap (kernel::tiled_amx)
    sum,     ///< the top-k sum in slot order
    count
  };
  static constexpr std::array<std::string_view, count> names{"sort", "inputs", "gemm1", "act", "gemm2", "gemms", "sum"};
  std::array<double, count> seconds{};
  long forwards = 0;

  /// Inside `gemms` (the pipeline of kernel::tiled_amx): thread-seconds, summed over the
  /// pipeline's workers, spent in GEMM 1 tasks, in the per-block work between the GEMMs, in GEMM 2
  /// tasks, and spinning while a GEMM 2 task waits for its block. What the workers' time
  /// (workers x gemms) holds besides these is claiming tasks and waiting to start or to end.
  /// (The parts of those kinds after the tiles: gemm1_epilogue, the part of gemm1_tasks spent in
  /// GEMM 1's epilogue — int8's scaling of the integers, bias, activation; by block, only what is
  /// left of it after the next panel's tiles (detail::gemm1_panels_interleaved); act_quantize, int8's
  /// quantization of the activations into GEMM 2's rows, in gemm1_tasks or block_work; and
  /// gemm2_epilogue, the part of gemm2_tasks spent in GEMM 2's, finish2_rows: scaling, bias,
  /// routing weight and the stores into y.)
  enum task_kind : int { gemm1_tasks, block_work, gemm2_tasks, waiting, gemm1_epilogue, act_quantize, gemm2_epilogue,
                         task_kinds };
  static constexpr std::array<std::string_view, task_kinds> task_names{
      "gemm1-tasks", "block-work", "gemm2-tasks", "waiting", "(of which gemm1-epilogue)", "(act-quantize)",
      "(gemm2-epilogue)"};
  std::array<double, task_kinds> task_seconds{};
  double worker_seconds = 0;  ///< workers x the pipeline's wall time
};

/// The steady clock, read after the instructions before it have completed (x86: lfence).
inline std::chrono::steady_clock::time_point fenced_now() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ volatile("lfence" ::: "memory");
#endif
  return std::chrono::steady_clock::now();
}

/// Charges its lifetime to `kind` of `sink`, a timed pipeline worker's thread-nanoseconds per
/// PhaseTimes::task_kind (detail::worker::task_ns), when that is set; otherwise costs a branch.
/// Timed, each end of the lifetime is
/// fenced (lfence on x86: the clock is read once the instructions before it have completed), so
/// that work still in flight is charged where it was issued: the tile instructions of a GEMM run
/// long after the core has issued them, and without the fence an epilogue's clock could start
/// while the tiles before it still ran. (On the device machine the split came out the same either
/// way: docs/decisions.md#fenced-task-clocks.)
class TaskClock {
 public:
  TaskClock(std::int64_t* sink, PhaseTimes::task_kind kind) noexcept : sink_(sink), kind_(kind) {
    if (sink_) since_ = fenced_now();
  }
  TaskClock(const TaskClock&) = delete;
  TaskClock& operator=(const TaskClock&) = delete;
  ~TaskClock() {
    if (sink_) sink_[kind_] += std::chrono::duration_cast<std::chrono::nanoseconds>(fenced_now() - since_).count();
  }

 private:
  std::int64_t* sink_;
  PhaseTimes::task_kind kind_;
  std::chrono::steady_clock::time_point since_{};
};

/// One forward's stopwatch: lap(p) charges the time since the previous lap (or construction) to p
/// of `sink` (nullptr: nowhere).
class PhaseClock {
 public:
  using clock = std::chrono::steady_clock;
  explicit PhaseClock(PhaseTimes* sink) noexcept : sink_(sink) {
    if (sink_) last_ = clock::now();
  }
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;
  ~PhaseClock() {
    if (sink_) ++sink_->forwards;
  }
  void lap(PhaseTimes::phase p) noexcept {
    if (!sink_) return;
    const clock::time_point now = clock::now();
    sink_->seconds[p] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  /// Where the forward records (nullptr: nowhere).
  [[nodiscard]] PhaseTimes* sink() const noexcept { return sink_; }

 private:
  PhaseTimes* sink_;
  clock::time_point last_{};
};

}  // namespace polymoe::kernels::tiled
