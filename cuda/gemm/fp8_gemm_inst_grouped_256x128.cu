// Explicit instantiation of the grouped (MoE) 256x128 kernels, bf16 and f32 output (fp8_gemm_grouped.cuh).
// One translation unit per tile shape so the kernels compile in parallel.
#include "gemm/fp8_gemm_grouped.cuh"

FP8GEMM_INSTANTIATE_GROUPED_TILE(256, 128)
