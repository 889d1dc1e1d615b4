#pragma once
// A fixed-size, 64-byte-aligned array: the storage of prepacked weights (one cache line per
// micro-kernel load, never split).
#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace polymoe::kernels::tiled {

inline constexpr std::size_t cache_line = 64;

/// n elements of T, zero-initialised, aligned to a cache line; movable, not copyable.
template <class T>
class AlignedBuffer {
  struct release {
    void operator()(T* p) const noexcept { ::operator delete[](p, std::align_val_t{cache_line}); }
  };

 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t n)
      : data_(static_cast<T*>(::operator new[](n * sizeof(T), std::align_val_t{cache_line}))), size_(n) {
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
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  [[nodiscard]] T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{cache_line}));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{cache_line}); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept { return true; }
};

/// A growable, cache-line-aligned array (workspace buffers).
template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace polymoe::kernels::tiled
