#pragma once
// DLPack at the API edge: views of DLTensors (the exchange format of PyTorch, CuPy and JAX) as the
// views polymoe's layers take. Needs <dlpack/dlpack.h> (Debian's libdlpack-dev, CMake's
// find_package(dlpack), or the copy PyTorch ships); the rest of polymoe does not include it.
//
//   auto out = polymoe::device_view_of(*out_tensor, "out");          // a CUDA tensor
//   layer.forward(polymoe::device_view_of(*x, "hidden"), polymoe::device_view_of(*z, "router_logits"), out, stream);
//
// Nothing is copied: a view points into the tensor's memory. A tensor polymoe cannot view as a
// row-major matrix (not 2-D, elements of a row not contiguous, a dtype other than float32,
// bfloat16 or int32, vector lanes) is a polymoe::error naming it.
#include <cstdint>
#include <string>
#include <string_view>

#include <dlpack/dlpack.h>

#include <polymoe/core/device_view.hpp>
#include <polymoe/core/error.hpp>
#include <polymoe/core/types.hpp>

namespace polymoe {

namespace detail {

inline std::string dlpack_dtype_name(const DLDataType& t) {
  const char* code = t.code == kDLFloat ? "float" : t.code == kDLBfloat ? "bfloat" : t.code == kDLInt ? "int"
                     : t.code == kDLUInt ? "uint" : "code";
  return concat(code, static_cast<int>(t.bits), t.lanes != 1 ? concat("x", t.lanes) : std::string());
}

inline element_type dlpack_element_type(const DLDataType& t, std::string_view what) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return element_type::f32;
    if (t.code == kDLBfloat && t.bits == 16) return element_type::bf16;
    if (t.code == kDLInt && t.bits == 32) return element_type::i32;
  }
  throw error(concat(what, " has dtype ", dlpack_dtype_name(t), "; polymoe takes float32, bfloat16 or int32"));
}

/// The tensor's rows, columns, row stride (elements) and first element, checked as a row-major matrix.
struct dlpack_matrix {
  void* data;
  element_type type;
  index_t rows, cols, row_stride;
};

inline dlpack_matrix dlpack_as_matrix(const DLTensor& t, std::string_view what) {
  require(t.ndim == 2, what, " has ", t.ndim, " dimensions, expected 2 (rows, columns)");
  require(t.shape != nullptr, what, " has no shape");
  const element_type type = dlpack_element_type(t.dtype, what);
  const index_t rows = t.shape[0], cols = t.shape[1];
  require(rows >= 0 && cols >= 0, what, " has shape [", rows, ", ", cols, "]");
  index_t row_stride = cols;
  if (t.strides != nullptr) {
    require(t.strides[1] == 1 || cols <= 1, what, " has a column stride of ", t.strides[1],
            " elements; polymoe takes rows whose elements are contiguous (make the tensor contiguous)");
    row_stride = rows <= 1 ? cols : t.strides[0];
    require(row_stride >= cols, what, " has a row stride of ", t.strides[0], " elements for ", cols,
            " columns; polymoe takes row-major tensors with rows that do not overlap");
  }
  require(t.byte_offset % static_cast<std::uint64_t>(element_bytes(type)) == 0, what, " has a byte offset of ",
          t.byte_offset, ", not a multiple of its element size");
  require(rows == 0 || cols == 0 || t.data != nullptr, what, " has no data");
  void* data = t.data == nullptr ? nullptr : static_cast<char*>(t.data) + t.byte_offset;
  return {data, type, rows, cols, row_stride};
}

}  // namespace detail

/// A device_view of a 2-D DLTensor in CUDA device or managed memory.
inline device_view device_view_of(const DLTensor& t, std::string_view what) {
  require(t.device.device_type == kDLCUDA || t.device.device_type == kDLCUDAManaged, what,
          " is not in CUDA device memory (DLPack device type ", static_cast<int>(t.device.device_type),
          "); pass a CUDA tensor");
  const detail::dlpack_matrix m = detail::dlpack_as_matrix(t, what);
  return {m.data, m.type, m.rows, m.cols, m.row_stride, t.device.device_id};
}

/// A strided Eigen view of a 2-D float32 DLTensor in host memory (CPU or CUDA-pinned), for the
/// host layers' forward (Eigen::Ref binds to it without a copy).
using host_matrix_view = Eigen::Map<Matrix, 0, Eigen::OuterStride<>>;
inline host_matrix_view host_matrix_of(const DLTensor& t, std::string_view what) {
  require(t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost, what,
          " is not in host memory (DLPack device type ", static_cast<int>(t.device.device_type), ")");
  const detail::dlpack_matrix m = detail::dlpack_as_matrix(t, what);
  require(m.type == element_type::f32, what, " is ", to_string(m.type), "; the host layers take float32");
  return {static_cast<float*>(m.data), m.rows, m.cols, Eigen::OuterStride<>(m.row_stride)};
}

}  // namespace polymoe
