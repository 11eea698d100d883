// Explicit instantiation of the 128x176 (BLOCK_M x BLOCK_N) kernels, bf16 and f32 output.
// One translation unit per tile shape so the kernels compile in parallel.
#include "gemm/fp8_gemm_kernel.cuh"

FP8GEMM_INSTANTIATE_TILE(128, 176)
