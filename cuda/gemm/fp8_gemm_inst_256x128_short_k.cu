// Explicit instantiation of the first three short-K twins of the 256x128 kernels (K <= 512, 1024
// and 1536: straight-line k-loops; FP8GEMM_SHORT_K_TILES_TO_12), bf16 output.
#include "gemm/fp8_gemm_kernel.cuh"

FP8GEMM_SHORT_K_TILES_TO_12(FP8GEMM_INSTANTIATE_SHORT_K_TILE)
