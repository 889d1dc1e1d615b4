#pragma once
// Non-owning views of tensors in memory a kernel of another memory space computes in (CUDA device
// memory): a pointer, a 2-D shape, a row stride, an element type and the device. They are what a
// layer whose kernel computes in space::cuda takes and writes (and what the formats of that space
// carry, formats.hpp); <polymoe/dlpack.hpp> makes them from DLPack's DLTensor at the API edge.
// Nothing here needs a CUDA header: a stream is CUDA's cudaStream_t through CUDA's own incomplete
// type (struct CUstream_st), nullptr being CUDA's default stream.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>

#include <polymoe/core/error.hpp>
#include <polymoe/core/types.hpp>

struct CUstream_st;

namespace polymoe {

using cuda_stream = CUstream_st*;  ///< a cudaStream_t

/// The element types device views carry: fp32 and bf16 activations, int32 expert ids.
enum class element_type : std::uint8_t { f32, bf16, i32 };

[[nodiscard]] constexpr std::string_view to_string(element_type t) noexcept {
  switch (t) {
    case element_type::f32: return "float32";
    case element_type::bf16: return "bfloat16";
    case element_type::i32: return "int32";
  }
  return "?";
}
[[nodiscard]] constexpr index_t element_bytes(element_type t) noexcept { return t == element_type::bf16 ? 2 : 4; }

template <class T>
inline constexpr element_type element_type_of = element_type::f32;
template <>
inline constexpr element_type element_type_of<std::int32_t> = element_type::i32;

/// A row-major matrix in device memory: rows × cols elements of `type`, row r at
/// data + r · row_stride elements (row_stride >= cols; elements of a row are contiguous).
struct device_view {
  void* data = nullptr;
  element_type type = element_type::f32;
  index_t rows = 0, cols = 0, row_stride = 0;
  int device = 0;

  /// A view of n × c elements of T at p, rows packed (row_stride = c).
  template <class T>
  static device_view of(T* p, index_t r, index_t c, int device = 0) noexcept {
    return {const_cast<void*>(static_cast<const void*>(p)), element_type_of<std::remove_const_t<T>>, r, c, c, device};
  }
  /// A view of bf16 bits (as std::uint16_t), rows packed.
  static device_view of_bf16(const std::uint16_t* p, index_t r, index_t c, int device = 0) noexcept {
    return {const_cast<std::uint16_t*>(p), element_type::bf16, r, c, c, device};
  }

  [[nodiscard]] bool empty() const noexcept { return rows == 0 || cols == 0; }
  /// The first n rows.
  [[nodiscard]] device_view top_rows(index_t n) const noexcept {
    device_view v = *this;
    v.rows = n;
    return v;
  }
  /// Rows [first, first + n).
  [[nodiscard]] device_view middle_rows(index_t first, index_t n) const noexcept {
    device_view v = top_rows(n);
    if (data) v.data = static_cast<char*>(data) + first * row_stride * element_bytes(type);
    return v;
  }
  /// The bytes from the first element to one past the last.
  [[nodiscard]] index_t extent_bytes() const noexcept {
    return empty() ? 0 : ((rows - 1) * row_stride + cols) * element_bytes(type);
  }
  /// Whether the two views' byte ranges meet.
  [[nodiscard]] bool overlaps(const device_view& o) const noexcept {
    if (empty() || o.empty()) return false;
    const auto* a = static_cast<const char*>(data);
    const auto* b = static_cast<const char*>(o.data);
    return a < b + o.extent_bytes() && b < a + extent_bytes();
  }
  template <class T>
  [[nodiscard]] T* as() const noexcept {
    return static_cast<T*>(data);
  }
};

/// polymoe::error naming `what` unless v is rows × cols (cols < 0: any) of one of the given types,
/// with a row stride that holds a row.
inline void require_view(const device_view& v, std::string_view what, index_t rows, index_t cols,
                         std::initializer_list<element_type> types) {
  bool type_ok = false;
  for (const element_type t : types) type_ok |= v.type == t;
  if (!type_ok) {
    std::string want;
    for (const element_type t : types) want += std::string(want.empty() ? "" : " or ") + std::string(to_string(t));
    throw error(detail::concat(what, " is ", to_string(v.type), ", expected ", want));
  }
  require(v.rows == rows && (cols < 0 || v.cols == cols), what, " is [", v.rows, ", ", v.cols, "], expected [", rows,
          ", ", cols < 0 ? std::string("k") : std::to_string(cols), "]");
  require(v.row_stride >= v.cols, what, " has a row stride of ", v.row_stride, " elements, less than its ", v.cols,
          " columns");
  require(v.rows == 0 || v.data != nullptr, what, " is a null pointer");
}

}  // namespace polymoe
