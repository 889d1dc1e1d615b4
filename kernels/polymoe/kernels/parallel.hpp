#pragma once
// The one place where polymoe's kernels start parallel work.
//
// Normally oneTBB: kernels::parallel_for is tbb::parallel_for. Built with POLYMOE_STD_THREADS it
// runs the same chunks (the range split by its grain size) on plain std::threads, as many as
// tbb::global_control allows, thread i taking chunks i, i + n, i + 2n, ... (so every thread runs
// some chunk whenever there are enough, however fast each one starts). That is the
// ThreadSanitizer build (scripts/sanitize.sh): TSan sees every happens-before edge there (thread
// start and join), whereas Debian's oneTBB is not instrumented, so its scheduler's
// synchronisation is invisible to TSan and every task would be reported as racing with the thread
// that waits for it. The task bodies, which are what we want checked, are the same code.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#if defined(POLYMOE_STD_THREADS)
#include <algorithm>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <tbb/global_control.h>
#endif

namespace polymoe::kernels {

#if defined(POLYMOE_STD_THREADS)
namespace parallel_detail {
template <class Index, class Body>
void std_threads_for(const tbb::blocked_range<Index>& r, const Body& body) {
  if (r.empty()) return;
  const auto grain = static_cast<std::size_t>(std::max<std::size_t>(1, r.grainsize()));
  const auto size = static_cast<std::size_t>(r.end() - r.begin());
  const std::size_t chunks = (size + grain - 1) / grain;
  const std::size_t threads = std::min(
      chunks, std::max<std::size_t>(1, tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism)));
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto work = [&](std::size_t first) {
    for (std::size_t c = first; c < chunks; c += threads) {
      const Index b = r.begin() + static_cast<Index>(c * grain);
      const Index e = static_cast<std::size_t>(r.end() - b) > grain ? b + static_cast<Index>(grain) : r.end();
      try {
        body(tbb::blocked_range<Index>(b, e, grain));
      } catch (...) {
        const std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (std::size_t i = 1; i < threads; ++i) pool.emplace_back(work, i);
  work(0);
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}
}  // namespace parallel_detail
#endif

/// body(const tbb::blocked_range<Index>&) over sub-ranges of r, in parallel.
template <class Index, class Body>
void parallel_for(const tbb::blocked_range<Index>& r, const Body& body) {
#if defined(POLYMOE_STD_THREADS)
  parallel_detail::std_threads_for(r, body);
#else
  tbb::parallel_for(r, body);
#endif
}

/// body(i) for every i in [first, last), in parallel.
template <class Index, class Body>
void parallel_for(Index first, Index last, const Body& body) {
#if defined(POLYMOE_STD_THREADS)
  parallel_detail::std_threads_for(tbb::blocked_range<Index>(first, last, 1), [&](const tbb::blocked_range<Index>& r) {
    for (Index i = r.begin(); i != r.end(); ++i) body(i);
  });
#else
  tbb::parallel_for(first, last, body);
#endif
}

}  // namespace polymoe::kernels
