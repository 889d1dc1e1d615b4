#pragma once
// A fixed-size, 64-byte-aligned array: the storage of prepacked weights (one cache line per
// micro-kernel load, never split); and the allocator of the workspace buffers.
//
// Large buffers (2 MiB or more: the weights, and the workspace of a prefill) are aligned to 2 MiB
// and, on Linux, offered transparent huge pages (madvise MADV_HUGEPAGE, before the first touch):
// where the kernel's THP mode is "madvise" (Debian's default), 4 KiB pages are otherwise all they
// get, and a forward that streams a gigabyte of weights walks the page tables for every 4 KiB of
// it. POLYMOE_HUGE_PAGES=0 in the environment turns the advice off (for measuring it;
// docs/decisions.md#huge-pages).
#include <cctype>
#include <charconv>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <strings.h>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace polymoe::kernels::tiled {

inline constexpr std::size_t cache_line = 64;

namespace detail {

inline constexpr std::size_t huge_page = std::size_t{2} << 20;

/// Says on stderr that knob `name` = `value` is ignored, and why (each knob is read once per
/// process, in noexcept code, and only steers measurements: a bad one is reported, not thrown).
inline void ignore_knob(const char* name, const char* value, const char* expected) noexcept {
  std::fprintf(stderr, "polymoe: ignoring %s=%s: expected %s\n", name, value, expected);
}

/// An on / off knob of the environment (the kernels' measurement switches): -1 when `name` is
/// unset, 0 for 0 / off / false / no, 1 for 1 / on / true / yes (any case); anything else is
/// reported and ignored (-1).
[[nodiscard]] inline int env_switch(const char* name) noexcept {
  const char* e = std::getenv(name);
  if (e == nullptr) return -1;
  const auto is = [e](const char* word) { return ::strcasecmp(e, word) == 0; };
  if (is("0") || is("off") || is("false") || is("no")) return 0;
  if (is("1") || is("on") || is("true") || is("yes")) return 1;
  ignore_knob(name, e, "0 or 1");
  return -1;
}

/// A number of the environment (the kernels' tuning knobs): nothing when `name` is unset, else its
/// value; text that is not a whole decimal number within +-2^30 is reported and ignored (nothing).
[[nodiscard]] inline std::optional<long> env_number(const char* name) noexcept {
  const char* e = std::getenv(name);
  if (e == nullptr) return std::nullopt;
  long v = 0;
  const char* end = e + std::strlen(e);
  const auto [p, ec] = std::from_chars(e, end, v);
  if (ec != std::errc{} || p != end || p == e || v > (1L << 30) || v < -(1L << 30)) {
    ignore_knob(name, e, "a whole number within +-2^30");
    return std::nullopt;
  }
  return v;
}

/// The alignment of a buffer of `bytes` bytes.
[[nodiscard]] inline std::size_t buffer_alignment(std::size_t bytes) noexcept {
  static const bool huge = env_switch("POLYMOE_HUGE_PAGES") != 0;
  return huge && bytes >= huge_page ? huge_page : cache_line;
}

/// Uninitialised storage for `bytes` bytes, aligned as buffer_alignment says (huge pages advised).
[[nodiscard]] inline void* allocate_buffer(std::size_t bytes) {
  const std::size_t align = buffer_alignment(bytes);
  void* p = ::operator new(bytes, std::align_val_t{align});
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (align == huge_page) (void)::madvise(p, bytes, MADV_HUGEPAGE);  // advice only: failure is harmless
#endif
  return p;
}

inline void free_buffer(void* p, std::size_t bytes) noexcept {
  ::operator delete(p, std::align_val_t{buffer_alignment(bytes)});
}

}  // namespace detail

/// Bytes of this machine's last-level cache (read once): the kernel's /sys value, else
/// sysconf(_SC_LEVEL3_CACHE_SIZE), else 32 MiB. /sys first: glibc's sysconf said 320 MiB for the 32
/// MiB L3 of the 2-core AMD EPYC development machine.
[[nodiscard]] inline std::size_t last_level_cache_bytes() {
  static const std::size_t bytes = [] {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index3/size");
    std::string s;
    if (f >> s && !s.empty() && std::isdigit(static_cast<unsigned char>(s[0]))) {
      std::size_t n = std::stoul(s);
      if (s.back() == 'K') n <<= 10;
      if (s.back() == 'M') n <<= 20;
      if (n > 0) return n;
    }
#if defined(__linux__) && defined(_SC_LEVEL3_CACHE_SIZE)
    if (const long v = sysconf(_SC_LEVEL3_CACHE_SIZE); v > 0) return static_cast<std::size_t>(v);
#endif
    return std::size_t{32} << 20;
  }();
  return bytes;
}

/// n elements of T, zero-initialised, aligned to a cache line; movable, not copyable.
template <class T>
class AlignedBuffer {
  struct release {
    std::size_t bytes = 0;
    void operator()(T* p) const noexcept { detail::free_buffer(p, bytes); }
  };

 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t n)
      : data_(static_cast<T*>(detail::allocate_buffer(n * sizeof(T))), release{n * sizeof(T)}), size_(n) {
    for (std::size_t i = 0; i < n; ++i) data_[i] = T{};
  }
  [[nodiscard]] T* data() noexcept { return data_.get(); }
  [[nodiscard]] const T* data() const noexcept { return data_.get(); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  std::unique_ptr<T[], release> data_;
  std::size_t size_ = 0;
};

/// std::allocator with cache-line alignment: a workspace row whose byte stride is a multiple of
/// 64 then starts on a line, so a 64-byte load or store of it (a tile row, a micro-kernel vector)
/// touches one line, not two. (The heap aligns to 16: with it, every 64-byte access was split.)
/// Large buffers get huge pages as the file's comment says.
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  [[nodiscard]] T* allocate(std::size_t n) { return static_cast<T*>(detail::allocate_buffer(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { detail::free_buffer(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept { return true; }
};

/// A growable, cache-line-aligned array (workspace buffers).
template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace polymoe::kernels::tiled
