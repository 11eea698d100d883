// Zeroes the rows of a grouped GEMM's output that no GEMM tile writes (see zero_rows.h).
// Memory-bound grid-stride loops of 16-byte stores; the region is known only on the device.
#include <algorithm>
#include <cstdint>

#include "common/sm90_ptx.cuh"
#include "gemm/zero_rows.h"

namespace fp8gemm {
namespace {

constexpr int kThreads = 256;

// Contiguous layout: rows [total, m) form one contiguous byte range at the end of D.
__global__ void __launch_bounds__(kThreads) zero_rows_contiguous_kernel(uint4* d, int m, long long row_chunks,
                                                                          const int* sizes, int num_groups) {
  ptx::griddep_launch_dependents();
  // total = min(sum of non-negative sizes, m), in 64 bits (int32 sizes may sum past 2^31).
  long long sum = 0;
  for (int g = static_cast<int>(threadIdx.x); g < num_groups; g += kThreads) sum += max(__ldg(sizes + g), 0);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __shared__ long long warp_sums[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  long long total = 0;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
  total = min(total, static_cast<long long>(m));

  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  const long long end = static_cast<long long>(m) * row_chunks;
  const long long step = static_cast<long long>(gridDim.x) * kThreads;
  for (long long i = total * row_chunks + static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; i < end;
       i += step)
    d[i] = zero;
}

// Masked layout: blockIdx.y walks the groups, blockIdx.x the rows [masked_m[g], mmax) of a group.
__global__ void __launch_bounds__(kThreads) zero_rows_masked_kernel(uint4* d, int num_groups, int mmax,
                                                                      long long row_chunks, const int* masked_m) {
  ptx::griddep_launch_dependents();
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  const long long step = static_cast<long long>(gridDim.x) * kThreads;
  for (int g = static_cast<int>(blockIdx.y); g < num_groups; g += static_cast<int>(gridDim.y)) {
    const int valid = min(max(__ldg(masked_m + g), 0), mmax);
    uint4* const group_d = d + static_cast<long long>(g) * mmax * row_chunks;
    const long long end = static_cast<long long>(mmax) * row_chunks;
    for (long long i = valid * row_chunks + static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; i < end;
         i += step)
      group_d[i] = zero;
  }
}

long long cdiv_ll(long long a, long long b) { return (a + b - 1) / b; }

// cudaLaunchKernelExC returns the launch error directly (no cudaGetLastError: that would also
// report, and clear, an unrelated earlier error of this thread).
template <typename... Args>
cudaError_t launch(void (*kernel)(Args...), dim3 grid, cudaStream_t stream, Args... args) {
  void* arg_ptrs[] = {&args...};
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  return cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(kernel), arg_ptrs);
}

}  // namespace

cudaError_t launch_zero_rows_contiguous(void* d, int m, long long row_bytes, const int* sizes, int num_groups,
                                        int max_blocks, cudaStream_t stream) {
  if (m < 0 || num_groups < 0 || row_bytes <= 0 || row_bytes % 16 != 0 || max_blocks < 1) return cudaErrorInvalidValue;
  if (m == 0) return cudaSuccess;
  if (d == nullptr || (num_groups > 0 && sizes == nullptr)) return cudaErrorInvalidValue;
  const long long row_chunks = row_bytes / 16;
  const long long blocks = std::min<long long>(cdiv_ll(static_cast<long long>(m) * row_chunks, kThreads), max_blocks);
  return launch(zero_rows_contiguous_kernel, dim3(static_cast<unsigned>(blocks), 1, 1), stream, static_cast<uint4*>(d),
                m, row_chunks, sizes, num_groups);
}

cudaError_t launch_zero_rows_masked(void* d, int num_groups, int mmax, long long row_bytes, const int* masked_m,
                                    int max_blocks, cudaStream_t stream) {
  if (mmax < 0 || num_groups < 0 || row_bytes <= 0 || row_bytes % 16 != 0 || max_blocks < 1)
    return cudaErrorInvalidValue;
  if (mmax == 0 || num_groups == 0) return cudaSuccess;
  if (d == nullptr || masked_m == nullptr) return cudaErrorInvalidValue;
  const long long row_chunks = row_bytes / 16;
  const int blocks_y = std::min(num_groups, 65535);
  const long long per_group = cdiv_ll(static_cast<long long>(mmax) * row_chunks, kThreads);
  const long long blocks_x = std::max(1LL, std::min<long long>(per_group, std::max(1, max_blocks / blocks_y)));
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(blocks_y), 1);
  return launch(zero_rows_masked_kernel, grid, stream, static_cast<uint4*>(d), num_groups, mmax, row_chunks, masked_m);
}

}  // namespace fp8gemm
