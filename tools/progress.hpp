#pragma once
// Progress of the tools' long steps on stderr, one implementation for every subcommand: nothing
// for a step that ends within about a second; after that a bar redrawn in place on a terminal, or
// a plain line every few seconds when stderr is a file or a pipe; a last line with the time when
// anything was shown. `--quiet` turns it off, `--progress` shows it from the start of every step.
//
//   cli::progress p(settings.shown.mode(), "writing q3", total_bytes, cli::progress::bytes);
//   ... p.set(done_bytes);            // from any thread; a step without counts just lives
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace polymoe::cli {

class progress {
 public:
  enum class mode { off, after_a_second, always };
  enum unit { bytes, items };

  /// A step called `label` of `total` units (0: not counted, only its time is shown).
  progress(mode m, std::string label, std::uint64_t total = 0, unit u = bytes)
      : mode_(m), label_(std::move(label)), total_(total), unit_(u), tty_(::isatty(STDERR_FILENO) == 1) {
    if (mode_ != mode::off) ticker_ = std::thread([this] { run(); });
  }
  progress(const progress&) = delete;
  progress& operator=(const progress&) = delete;
  ~progress() {
    if (!ticker_.joinable()) return;
    {
      const std::lock_guard lock(mutex_);
      done_flag_ = true;
    }
    wake_.notify_one();
    ticker_.join();
    if (shown_) {
      done_ = total_ ? total_ : done_.load();
      draw(true);
    }
  }

  /// Units done so far.
  void set(std::uint64_t done) noexcept { done_.store(done, std::memory_order_relaxed); }

 private:
  using clock = std::chrono::steady_clock;

  void run() {
    std::unique_lock lock(mutex_);
    const auto first = mode_ == mode::always ? std::chrono::milliseconds(0) : std::chrono::milliseconds(1000);
    if (wake_.wait_for(lock, first, [this] { return done_flag_; })) return;
    // a bar several times a second on a terminal; a line every few seconds in a log
    const auto every = tty_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(5000);
    do {
      draw(false);
    } while (!wake_.wait_for(lock, every, [this] { return done_flag_; }));
  }

  [[nodiscard]] std::string amount(std::uint64_t n) const {
    char b[48];
    if (unit_ == bytes && n >= 1000000000u)
      std::snprintf(b, sizeof b, "%.2f GB", static_cast<double>(n) / 1e9);
    else if (unit_ == bytes)
      std::snprintf(b, sizeof b, "%.1f MB", static_cast<double>(n) / 1e6);
    else
      std::snprintf(b, sizeof b, "%llu", static_cast<unsigned long long>(n));
    return b;
  }

  void draw(bool last) {
    shown_ = true;
    const double secs = std::chrono::duration<double>(clock::now() - start_).count();
    const std::uint64_t done = done_.load(std::memory_order_relaxed);
    std::string line = "polymoe: " + label_;
    if (total_) {
      const double f = std::min(1.0, static_cast<double>(done) / static_cast<double>(total_));
      if (tty_) {
        constexpr int width = 30;
        const int filled = static_cast<int>(f * width);
        line += " [" + std::string(static_cast<std::size_t>(filled), '#') +
                std::string(static_cast<std::size_t>(width - filled), '.') + "]";
      }
      char pct[16];
      std::snprintf(pct, sizeof pct, " %3.0f %%", f * 100.0);
      line += pct + std::string(", ") + amount(done) + " of " + amount(total_);
    }
    char t[40];
    std::snprintf(t, sizeof t, last ? ", done in %.1f s" : ", %.1f s", secs);
    line += t;
    if (tty_)
      std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), last ? "\n" : "");
    else
      std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }

  mode mode_;
  std::string label_;
  std::uint64_t total_;
  unit unit_;
  bool tty_;
  clock::time_point start_ = clock::now();
  std::atomic<std::uint64_t> done_{0};
  bool shown_ = false;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_flag_ = false;
  std::thread ticker_;
};

}  // namespace polymoe::cli
