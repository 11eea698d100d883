// CUDA_CHECK for the standalone tools (our harnesses and the DeepGEMM peer): a failed runtime
// call prints where and exits with status 2.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CUDA_CHECK(expr)                                                                      \
  do {                                                                                        \
    cudaError_t err_ = (expr);                                                                \
    if (err_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(err_), __FILE__, \
                   __LINE__, cudaGetErrorString(err_));                                       \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)
