// Explicit instantiation of the 128x112 weight-gradient kernels (dense and k-grouped, f32 and bf16
// output; fp8_gemm_wgrad.cuh). One translation unit per tile shape so the kernels compile in parallel.
#include "gemm/fp8_gemm_wgrad.cuh"

FP8GEMM_INSTANTIATE_WGRAD_TILE(128, 112)
