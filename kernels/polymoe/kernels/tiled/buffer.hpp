// A fixed-size, 64-byte-aligned array: the storage of prepacked weights (one cache line per
// micro-kernel load, never split); and the allocator of the workspace buffers.
//
// Large buffers (2 MiB or more: the weights, and the workspace of a prefill) are aligned to 2 MiB
// and, on Linux, offered transparent huge pages (madvise MADV_HUGEPAGE, before the first touch):
// where the kernel's THP mode is "madvise" (Debian's default), 4 KiB pages are otherwise all they
// get, and a forward that streams a gigabyte of weights walks the page tables for every 4 KiB of
// it. Each buffer is told whether to (tuning::huge_pages, on by default; docs/decisions.md#huge-pages).
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_BUFFER) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_BUFFER
#undef POLYMOE_TILED_GUARD_BUFFER
#else
#define POLYMOE_TILED_GUARD_BUFFER
#endif
#include <cctype>
#include <cstddef>
#include <fstream>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

inline constexpr std::size_t cache_line = 64;

namespace detail {

inline constexpr std::size_t huge_page = std::size_t{2} << 20;

/// The alignment of a buffer of `bytes` bytes: 2 MiB for a large one when it takes huge pages.
[[nodiscard]] constexpr std::size_t buffer_alignment(std::size_t bytes, bool huge_pages) noexcept {
  return huge_pages && bytes >= huge_page ? huge_page : cache_line;
}

/// Uninitialised storage for `bytes` bytes, aligned as buffer_alignment says (huge pages advised).
[[nodiscard]] inline void* allocate_buffer(std::size_t bytes, bool huge_pages) {
  const std::size_t align = buffer_alignment(bytes, huge_pages);
  void* p = ::operator new(bytes, std::align_val_t{align});
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (align == huge_page) (void)::madvise(p, bytes, MADV_HUGEPAGE);  // advice only: failure is harmless
#endif
  return p;
}

/// Frees what allocate_buffer(bytes, huge_pages) gave.
inline void free_buffer(void* p, std::size_t bytes, bool huge_pages) noexcept {
  ::operator delete(p, std::align_val_t{buffer_alignment(bytes, huge_pages)});
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

/// n elements of T, zero-initialised, aligned to a cache line (large ones to 2 MiB with huge pages
/// advised, unless `huge_pages` is false); movable, not copyable.
template <class T>
class AlignedBuffer {
  struct release {
    std::size_t bytes = 0;
    bool huge_pages = true;
    void operator()(T* p) const noexcept { detail::free_buffer(p, bytes, huge_pages); }
  };

 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t n, bool huge_pages = true)
      : data_(static_cast<T*>(detail::allocate_buffer(n * sizeof(T), huge_pages)), release{n * sizeof(T), huge_pages}),
        size_(n) {
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
/// Large buffers get huge pages as the file's comment says, unless `huge_pages` is false; the flag
/// travels with the allocator (a vector copied, moved or swapped keeps its own).
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using is_always_equal = std::false_type;
  bool huge_pages = true;
  CacheLineAllocator() = default;
  explicit CacheLineAllocator(bool huge) noexcept : huge_pages(huge) {}
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>& o) noexcept : huge_pages(o.huge_pages) {}
  [[nodiscard]] T* allocate(std::size_t n) {
    return static_cast<T*>(detail::allocate_buffer(n * sizeof(T), huge_pages));
  }
  void deallocate(T* p, std::size_t n) noexcept { detail::free_buffer(p, n * sizeof(T), huge_pages); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>& o) const noexcept {
    return huge_pages == o.huge_pages;
  }
};

/// A growable, cache-line-aligned array (workspace buffers).
template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_BUFFER
