#pragma once
// A fixed-size, 64-byte-aligned array: the storage of prepacked weights (one cache line per
// micro-kernel load, never split).
#include <cstddef>
#include <memory>
#include <new>

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

}  // namespace polymoe::kernels::tiled
