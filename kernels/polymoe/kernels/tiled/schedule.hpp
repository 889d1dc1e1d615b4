// How a forward's GEMM tasks run: every task of a phase in one parallel loop, or both GEMMs as one
// pipeline of tasks in which a block's GEMM 2 starts once its GEMM 1 is done (the workers, their
// slots and timing, the choice of GEMM 1 by block or by panel), and the phases in order.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_SCHEDULE) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_SCHEDULE
#undef POLYMOE_TILED_GUARD_SCHEDULE
#else
#define POLYMOE_TILED_GUARD_SCHEDULE
#endif
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <polymoe/kernels/parallel.hpp>
#include <polymoe/kernels/tiled/phases.hpp>
#include <polymoe/kernels/tiled/sort.hpp>
#include <polymoe/kernels/tiled/tuning.hpp>
#include <polymoe/kernels/tiled/workspace.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

/// A pause in a spin-wait (x86: the pause instruction; elsewhere a yield).
inline void spin_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

namespace detail {

/// The slot a task body gets outside pipelined_tasks (parallel_tasks): none.
inline constexpr std::size_t no_slot = static_cast<std::size_t>(-1);

/// Who runs a task body: the pipeline worker's slot (below pipeline_workers(); no_slot outside
/// the pipeline) and, in a timed pipeline, the worker's thread-nanoseconds per
/// PhaseTimes::task_kind, which the TaskClocks inside the body charge (nullptr: not timed).
struct worker {
  std::size_t slot = no_slot;
  std::int64_t* task_ns = nullptr;
};

/// Calls a task body as body(task, next, w) when it takes the worker, else as body(task, next).
template <class F>
inline void call_task(F& body, const Task& t, const Task* next, const worker& w) {
  if constexpr (std::is_invocable_v<F&, const Task&, const Task*, const worker&>)
    body(t, next, w);
  else
    body(t, next);
}

/// Calls a block_done as done(b, w) when it takes the worker, else as done(b).
template <class Done>
inline void call_done(Done& done, index_t b, const worker& w) {
  if constexpr (std::is_invocable_v<Done&, index_t, const worker&>)
    done(b, w);
  else
    done(b);
}

/// body(task, next) for every task, in parallel ranges of consecutive tasks; `next` is the task
/// the same thread runs after this one (nullptr at the end of its range), whose weights the AMX
/// loop starts fetching during this task's last slab (amx::kblock_ahead).
template <class F>
inline void parallel_tasks(const std::vector<Task>& tasks, F&& body) {
  kernels::parallel_for(tbb::blocked_range<std::size_t>(0, tasks.size()), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i != r.end(); ++i)
      call_task(body, tasks[i], i + 1 != r.end() ? &tasks[i + 1] : nullptr, worker{});
  });
}

/// The workers of pipelined_tasks: the threads the arena and tbb::global_control allow.
inline std::size_t pipeline_workers() noexcept {
  const int arena = std::max(1, tbb::this_task_arena::max_concurrency());
  return std::max<std::size_t>(1, std::min<std::size_t>(static_cast<std::size_t>(arena),
                                                        tbb::global_control::active_value(
                                                            tbb::global_control::max_allowed_parallelism)));
}

/// Whether a layer that may pipeline its GEMMs does: unless tuning::pipeline is off, which runs
/// them as phases.
inline bool pipeline_on(bool pipelined, const tuning& tune) noexcept { return pipelined && tune.pipeline; }

/// Whether GEMM 1 in kernel::tiled_amx runs one task per row block, all of the block's panels in
/// turn (gemm1_panels_interleaved: each panel's epilogue inside the next panel's tiles), instead
/// of one task per (block, panel). int8's task also gathers the block's quantized input rows from
/// the per-token rows into its worker's buffer (Workspace::block_in) and keeps the block's fp32
/// activations in another (block_act) until it quantizes them into GEMM 2's rows, so that neither
/// the inputs in sorted order (N rows, 35 MB at T = 2048 on Qwen3-30B-A3B) nor the fp32
/// activations [N, I] (50 MB) are written to memory and read back. It needs the pipeline's worker
/// slots (pipeline_on), and enough rows per block: with few, a task per block leaves threads idle
/// (decode: 8 blocks at T = 1) and there is little to save. Measured on the 16-core device machine
/// (Qwen3-30B-A3B, 128 experts, paired A B B A rounds; docs/decisions.md#gemm1-by-block), time by
/// panel over time by block: int8 before the interleaved epilogues, 16 and more rows per block on
/// average (T = 256, 512, 2048) 1.10-1.47 in all eight rounds; 8 and fewer (T = 1-128) 0.84-1.05
/// in the quieter rounds of 41 forwards (T = 16-128), decode 0.68 and 0.70; at 2 threads, T = 512
/// and 2048, 0.90-1.24 in three rounds, unresolved. With the interleaved epilogues (medians of 7
/// rounds): int8 1.125 at T = 512 and 1.099 at T = 2048, bf16 1.049 and 1.018 (bf16 had gained
/// nothing from by block without them: 0.96-1.00).
/// `choice` (tuning::gemm1_by_block) off / on turns it off / on wherever the pipeline runs.
inline bool gemm1_by_block(bool pipeline, index_t rows, std::size_t blocks, mode choice) noexcept {
  constexpr index_t rows_per_block = 16;
  if (!pipeline) return false;
  if (choice != mode::automatic) return choice == mode::on;
  return rows >= rows_per_block * static_cast<index_t>(blocks);
}

/// GEMM 1 of a row block by block (gemm1_by_block): panels 0 .. panels − 1 in turn, tiles(cb, c,
/// side) computing panel cb into c, one of two buffers, and finish(cb, c, i) the epilogue of its
/// row i. Each panel's epilogue runs row by row inside the next panel's tiles, called between
/// their k-blocks (side, amx::block22_side: vector work while the tiles compute), and what is left
/// of it after them; the last panel's after its tiles. Measured on the 16-core device machine (int8,
/// Qwen3-30B-A3B, T = 2048, invocations alternating with the build that finished each panel after
/// its tiles; docs/decisions.md#gemm1-epilogue-interleaved): GEMM 1's tasks 10-17 % less
/// thread-time, of their 32-33 thread-ms of epilogue 1.7-1.9 left after the tiles. (Tried first in
/// a separate program: a row every k-block paid, a row every fourth did not.) What is left after
/// the tiles is charged to gemm1_epilogue of `task_ns` (nullptr: not timed).
template <class C, class Tiles, class Finish>
inline void gemm1_panels_interleaved(index_t panels, index_t rows, C* buf0, C* buf1, std::int64_t* task_ns,
                                     Tiles tiles, Finish finish) {
  index_t pending = -1, next_row = rows;  // the panel whose epilogue is under way, its next row
  C* pc = nullptr;
  const auto side = [&] {
    if (next_row < rows) finish(pending, pc, next_row++);
  };
  const auto rest = [&] {
    const TaskClock clock(task_ns, PhaseTimes::gemm1_epilogue);
    while (next_row < rows) finish(pending, pc, next_row++);
  };
  for (index_t cb = 0; cb < panels; ++cb) {
    C* c = cb % 2 == 0 ? buf0 : buf1;
    tiles(cb, c, side);
    rest();
    pending = cb, pc = c, next_row = 0;
  }
  rest();
}

/// GEMM 1's tasks, `block_done(b)` once per row block b after all of its GEMM 1 tasks, and GEMM
/// 2's tasks, run as one stream without a barrier between the GEMMs: every thread claims the next
/// task from an atomic cursor (GEMM 1's in make_tasks order, then GEMM 2's); a GEMM 2 task waits
/// until its block is done, and the thread that finishes a block's last GEMM 1 task runs
/// block_done for it (per-row work between the GEMMs: the int8 quantization of the activations,
/// on rows still in cache). Threads that run out of GEMM 1 go on to GEMM 2 of finished blocks
/// instead of waiting for the slowest thread of GEMM 1, which on a shared machine (and for
/// decode, where a phase is tens of tasks a thread) is a large part of a phase. Measured on the
/// device machine (16 threads, Qwen3-30B-A3B, alternating with the pipeline off, with which
/// run_gemms runs the phases instead): bf16 decode 0.632 and 0.672 ms against 0.680 and 0.855; prefill not told
/// apart from the run-to-run spread (docs/decisions.md#pipeline).
///
/// No deadlock: tasks are claimed in order (runs of consecutive tasks, none across the end of GEMM
/// 1), so every GEMM 1 task that a GEMM 2 task waits for has been claimed by a thread that runs
/// it, or is running earlier tasks of its claim that wait for nothing; with one thread,
/// all of GEMM 1 runs before GEMM 2. gemm1 and gemm2 are called as parallel_tasks' body, with the
/// next task of the thread's claim, and (call_task, call_done) the worker: no two tasks that run
/// at once have the same slot, and every slot is below pipeline_workers(). Each output element is
/// still computed by one task in a fixed order: the result does not depend on the thread count or
/// on which thread ran what.
///
/// With `timed` (the forward records its phases), each worker's thread-time per kind of work
/// (PhaseTimes::task_kind) goes into timed's task_seconds, charged by TaskClocks into the worker's
/// task_ns and summed at its end.
template <class F1, class Done, class F2>
inline void pipelined_tasks(const std::vector<RowBlock>& blocks, const std::vector<Task>& tasks13, index_t panels13,
                            const std::vector<Task>& tasks2, Workspace::Counters& counters, F1&& gemm1,
                            Done&& block_done, F2&& gemm2, PhaseTimes* timed = nullptr) {
  const std::size_t n1 = tasks13.size(), n = n1 + tasks2.size();
  // per block: GEMM 1 tasks still to finish, + 1 until block_done has run; 0 = ready for GEMM 2
  std::atomic<std::int32_t>* const pending = counters.at_least(blocks.size());
  for (std::size_t b = 0; b < blocks.size(); ++b)
    pending[b].store(static_cast<std::int32_t>(panels13) + 1, std::memory_order_relaxed);
  std::atomic<std::size_t> cursor{0};
  const std::size_t threads = pipeline_workers();
  std::array<std::atomic<std::int64_t>, PhaseTimes::task_kinds> total_ns{};
  // task i on worker `w`, `last` the end of the thread's claim (the next task it runs, if
  // i + 1 < last)
  const auto run = [&](std::size_t i, std::size_t last, const worker& w) {
    const bool more = i + 1 < last;
    if (i < n1) {
      const Task& t = tasks13[i];
      {
        const TaskClock clock(w.task_ns, PhaseTimes::gemm1_tasks);
        call_task(gemm1, t, more ? &tasks13[i + 1] : nullptr, w);
      }
      std::atomic<std::int32_t>& p = pending[static_cast<std::size_t>(t.block)];
      if (p.fetch_sub(1, std::memory_order_acq_rel) == 2) {  // the block's last GEMM 1 task
        const TaskClock clock(w.task_ns, PhaseTimes::block_work);
        call_done(block_done, static_cast<index_t>(t.block), w);
        p.store(0, std::memory_order_release);
      }
    } else {
      const Task& t = tasks2[i - n1];
      const std::atomic<std::int32_t>& p = pending[static_cast<std::size_t>(t.block)];
      {
        const TaskClock clock(w.task_ns, PhaseTimes::waiting);
        while (p.load(std::memory_order_acquire) != 0) spin_pause();
      }
      const TaskClock clock(w.task_ns, PhaseTimes::gemm2_tasks);
      call_task(gemm2, t, more ? &tasks2[i + 1 - n1] : nullptr, w);
    }
  };
  using clock = std::chrono::steady_clock;
  const clock::time_point start = timed ? clock::now() : clock::time_point{};
  // Guided claims: a run of consecutive tasks, 1 / (2 · threads) of what is left of the current
  // GEMM (at least one), so that a thread keeps an expert's A rows and panels while there is much
  // to do, and the last claims are single tasks (one task per claim lost the locality that
  // parallel_tasks' ranges have: prefill ran up to 20 % slower than the phases on the device
  // machine, in two alternating pairs; docs/decisions.md#pipeline).
  // (the worker's slot: the first index of its range, which no other running worker holds)
  kernels::parallel_for(tbb::blocked_range<std::size_t>(0, threads, 1), [&](const tbb::blocked_range<std::size_t>& r) {
    std::int64_t local[PhaseTimes::task_kinds] = {};
    const worker w{r.begin(), timed ? local : nullptr};
    std::size_t c = cursor.load(std::memory_order_relaxed);
    while (c < n) {
      const std::size_t end = c < n1 ? n1 : n;
      const std::size_t take = std::max<std::size_t>(1, (end - c) / (2 * threads));
      if (!cursor.compare_exchange_weak(c, c + take, std::memory_order_relaxed)) continue;
      for (std::size_t i = c; i != c + take; ++i) run(i, c + take, w);
      c = cursor.load(std::memory_order_relaxed);
    }
    if (timed) {
      for (int kind = 0; kind < PhaseTimes::task_kinds; ++kind)
        total_ns[static_cast<std::size_t>(kind)].fetch_add(local[kind], std::memory_order_relaxed);
    }
  });
  if (timed) {
    for (int kind = 0; kind < PhaseTimes::task_kinds; ++kind)
      timed->task_seconds[static_cast<std::size_t>(kind)] +=
          1e-9 * static_cast<double>(total_ns[static_cast<std::size_t>(kind)].load());
    timed->worker_seconds += static_cast<double>(threads) * std::chrono::duration<double>(clock::now() - start).count();
  }
}

/// GEMM 1's tasks, `block_done(b)` for every row block (nullptr: nothing between the GEMMs), and
/// GEMM 2's tasks: as one pipeline when `pipelined` (pipelined_tasks; the time charged to `gemms`),
/// else as phases (gemm1, act when there is a block_done, gemm2). With tuning::pipeline off (for
/// measuring the pipeline) a pipelined layer's GEMMs run as phases, still charged to `gemms`.
template <class F1, class Done, class F2>
inline void run_gemms(bool pipelined, const tuning& tune, PhaseClock& clock, const std::vector<RowBlock>& blocks,
                      const std::vector<Task>& tasks13, index_t panels13, const std::vector<Task>& tasks2,
                      Workspace::Counters& counters, F1&& gemm1, Done&& block_done, F2&& gemm2) {
  constexpr bool has_done = !std::is_same_v<std::decay_t<Done>, std::nullptr_t>;
  if (pipeline_on(pipelined, tune)) {
    const auto done = [&](index_t b, const worker& w) {
      if constexpr (has_done) call_done(block_done, b, w);
    };
    pipelined_tasks(blocks, tasks13, panels13, tasks2, counters, gemm1, done, gemm2, clock.sink());
    return clock.lap(PhaseTimes::gemms);
  }
  const auto lap = [&](PhaseTimes::phase p) {
    if (!pipelined) clock.lap(p);
  };
  parallel_tasks(tasks13, gemm1);
  lap(PhaseTimes::gemm1);
  if constexpr (has_done) {
    kernels::parallel_for(tbb::blocked_range<std::size_t>(0, blocks.size()), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t b = r.begin(); b != r.end(); ++b) call_done(block_done, static_cast<index_t>(b), worker{});
    });
    lap(PhaseTimes::act);
  }
  parallel_tasks(tasks2, gemm2);
  clock.lap(pipelined ? PhaseTimes::gemms : PhaseTimes::gemm2);
}


}  // namespace detail

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_SCHEDULE
