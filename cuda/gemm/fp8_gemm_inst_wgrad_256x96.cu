// Explicit instantiation of the 256x96 weight-gradient kernels (dense: scale products on the tensor
// cores, GemmTraits::kScaleMma; k-grouped too). One translation unit per tile shape.
#include "gemm/fp8_gemm_wgrad.cuh"

FP8GEMM_INSTANTIATE_WGRAD_TILE(256, 96)
