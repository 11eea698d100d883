// Explicit instantiation of the posted loop kernels of the 256x128 tile (K <= 4096; tiles decoded
// by the producer alone: FP8GEMM_POSTED_LOOP_TILES), bf16 output.
#include "gemm/fp8_gemm_kernel.cuh"

FP8GEMM_POSTED_LOOP_TILES(FP8GEMM_INSTANTIATE_POSTED_LOOP_TILE)
