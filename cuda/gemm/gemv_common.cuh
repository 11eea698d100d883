// What the two pipeline-free decode GEMMs (fp8_gemv.cu on the CUDA cores, fp8_gemv_mma.cu on
// mma.sync) share: the problems they accept, the store of one FP32 sum, the launch on D's dtype.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "gemm/fp8_gemm.h"

namespace fp8gemm::gemv {

// cudaErrorInvalidValue unless a kernel of M <= max_m can run p: K % 16 == 0 (a lane's 16-byte load
// lies all inside K or all outside), A and B 16-byte aligned, N <= 2^30 and K <= max_k (the
// kernel's grid, row and byte offsets in 32 bits). An empty D (M or N 0) needs no pointers.
inline cudaError_t check_problem(const GemmProblem& p, int max_m, long long max_k) {
  if (p.m < 0 || p.m > max_m || p.n < 0 || p.k <= 0 || p.k % 16 != 0) return cudaErrorInvalidValue;
  if (p.n > (1 << 30) || p.k > max_k) return cudaErrorInvalidValue;
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if (p.sfa_ld < p.m || !p.a || !p.b || !p.sfa || !p.sfb || !p.d) return cudaErrorInvalidValue;
  const auto aligned16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return aligned16(p.a) && aligned16(p.b) ? cudaSuccess : cudaErrorInvalidValue;
}

template <class OutT>
__device__ __forceinline__ void store(OutT* d, long long index, float value) {
  if constexpr (std::is_same<OutT, float>::value)
    d[index] = value;
  else
    d[index] = __float2bfloat16_rn(value);
}

// Calls launch(d) with D typed as p's output dtype (float* or __nv_bfloat16*); the launch's error.
template <class Launch>
cudaError_t on_out_dtype(const GemmProblem& p, Launch&& launch) {
  if (p.out_dtype == OutDtype::kF32)
    launch(static_cast<float*>(p.d));
  else
    launch(static_cast<__nv_bfloat16*>(p.d));
  return cudaGetLastError();
}

}  // namespace fp8gemm::gemv
