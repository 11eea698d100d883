// Explicit instantiation of the fourth short-K twin of the 256x128 kernels (K <= 2048, from 20 waves
// of tiles; FP8GEMM_SHORT_K_TILES_16), bf16 output: a translation unit of its own, which compiles
// beside the other twins'.
#include "gemm/fp8_gemm_kernel.cuh"

FP8GEMM_SHORT_K_TILES_16(FP8GEMM_INSTANTIATE_SHORT_K_TILE)
