// Small helpers shared by the XLA FFI handlers: turning CUDA errors and shape mismatches into
// ffi::Error (a handler never crashes the process), and the element counts of a buffer.
#pragma once
#include <cstdint>
#include <string>

#include <cuda_runtime.h>

#include "xla/ffi/api/ffi.h"

namespace fp8gemm::ffi_util {

namespace ffi = xla::ffi;

inline ffi::Error cuda_error(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(what) + ": " + cudaGetErrorString(err));
}

inline ffi::Error invalid(const std::string& msg) { return ffi::Error::InvalidArgument(msg); }

// Product of all dimensions but the last `trailing` ones.
inline int64_t leading_size(ffi::Span<const int64_t> dims, size_t trailing) {
  int64_t n = 1;
  for (size_t i = 0; i + trailing < dims.size(); ++i) n *= dims[i];
  return n;
}

inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace fp8gemm::ffi_util
