// Zeroing of the output rows that no tile of a grouped GEMM writes (cuda/gemm/zero_rows.cu).
//
// Launched on the GEMM's stream right before it; the sizes are read on the device (no host
// synchronisation, no allocation). Each kernel lets the next grid in the stream start early
// (griddepcontrol.launch_dependents); the rows it writes are disjoint from the GEMM's.
#pragma once
#include <cuda_runtime.h>

namespace fp8gemm {

// Contiguous layout: D is [m rows][row_bytes]; zeroes rows [min(sum_g max(sizes[g], 0), m), m).
// row_bytes % 16 == 0 and d 16-byte aligned. sizes may be null when num_groups == 0.
cudaError_t launch_zero_rows_contiguous(void* d, int m, long long row_bytes, const int* sizes, int num_groups,
                                        int max_blocks, cudaStream_t stream);

// Masked layout: D is [num_groups][mmax rows][row_bytes]; zeroes rows [clamp(masked_m[g], 0, mmax),
// mmax) of every group g. row_bytes % 16 == 0 and d 16-byte aligned.
cudaError_t launch_zero_rows_masked(void* d, int num_groups, int mmax, long long row_bytes, const int* masked_m,
                                    int max_blocks, cudaStream_t stream);

}  // namespace fp8gemm
