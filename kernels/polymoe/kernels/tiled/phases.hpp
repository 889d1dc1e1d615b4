#pragma once
// Where a tiled forward spends its time, for benchmarks: wall-clock seconds per phase of the
// pipeline (forward.hpp), summed over forwards. Off unless the calling thread has set
// `phase_times` (a thread_local pointer: a forward runs its phases from the thread that calls it,
// and records them there); off, a forward pays one load and branch per phase.
//
//   kernels::tiled::PhaseTimes t;
//   kernels::tiled::phase_times = &t;  // this thread's forwards record into t
//   ... forwards ...
//   kernels::tiled::phase_times = nullptr;
#include <array>
#include <chrono>
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
};

/// Where this thread's forwards record their phases (nullptr: nowhere).
inline thread_local PhaseTimes* phase_times = nullptr;

/// One forward's stopwatch: lap(p) charges the time since the previous lap (or construction) to p.
class PhaseClock {
 public:
  using clock = std::chrono::steady_clock;
  PhaseClock() noexcept : sink_(phase_times) {
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

 private:
  PhaseTimes* sink_;
  clock::time_point last_{};
};

}  // namespace polymoe::kernels::tiled
