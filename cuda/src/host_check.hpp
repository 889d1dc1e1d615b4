#pragma once
// What the host sides of the CUDA component share: CUDA errors as polymoe::error, and a scope
// with a given device current.
#include <cuda_runtime_api.h>

#include <polymoe/core/error.hpp>

namespace polymoe::cuda::detail {

[[noreturn]] inline void fail(cudaError_t err, const char* call) {
  throw error(polymoe::detail::concat("cuda: ", call, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}
inline void check(cudaError_t err, const char* call) {
  if (err != cudaSuccess) [[unlikely]]
    fail(err, call);
}

// Makes `device` current for a scope, and the caller's device current again after it.
class device_scope {
 public:
  explicit device_scope(int device) {
    check(cudaGetDevice(&saved_), "cudaGetDevice");
    if (saved_ != device) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~device_scope() {
    int now = saved_;
    if (cudaGetDevice(&now) == cudaSuccess && now != saved_) (void)cudaSetDevice(saved_);
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;

 private:
  int saved_ = 0;
};

}  // namespace polymoe::cuda::detail
