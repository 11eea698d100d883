// Host-side helper: encode TMA tensor maps without linking libcuda.
//
// cuTensorMapEncodeTiled is a driver API entry point. Instead of linking -lcuda we ask the CUDA
// runtime for the driver's function pointer (cudaGetDriverEntryPointByVersion), once per process.
// <cuda.h> / <cudaTypedefs.h> are included for the types (CUtensorMap, the PFN typedef) only.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fp8gemm {

// Returns the driver's cuTensorMapEncodeTiled (ABI of CUDA 12.0), or nullptr if unavailable.
// Thread-safe (function-local static).
inline PFN_cuTensorMapEncodeTiled_v12000 get_tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = []() -> PFN_cuTensorMapEncodeTiled_v12000 {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
    // 12000: request the entry point with the CUDA 12.0 signature (the PFN type above).
    cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault,
                                                       &status);
    if (err != cudaSuccess || status != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();  // do not leave a sticky-looking error behind for the caller
      return nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

// Describes a row-major 2D tensor [rows, cols] (cols contiguous) with a row pitch in bytes, and the
// box (tile) that one TMA instruction moves: box_cols x box_rows elements.
struct TensorMap2D {
  const void* base = nullptr;
  CUtensorMapDataType dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  uint64_t rows = 0, cols = 0;
  uint64_t row_pitch_bytes = 0;
  uint32_t box_rows = 0, box_cols = 0;
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  // L2 sector promotion for loads; 256B suits streaming operand tiles.
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
};

// Encodes a tensor of `rank` (1..5) dimensions into `out`: dims innermost first (dims[0] is
// contiguous), strides[i] the byte stride of dimension i + 1 (in any order), one box of `box`
// elements per TMA instruction. Returns false if the driver entry point is missing or the driver
// rejects the parameters (alignment: base 16 B, strides multiples of 16 B; box dims 1..256; with
// a swizzle, box[0] * element size must not exceed the swizzle span).
// Out-of-bounds elements are zero-filled on load (CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE means "fill
// with zeros", not "no fill") and skipped on store.
inline bool encode_tensor_map(CUtensorMap* out, CUtensorMapDataType dtype, int rank, const void* base,
                              const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                              CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2_promotion) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = get_tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint32_t element_stride[5] = {1, 1, 1, 1, 1};  // dense boxes
  CUresult res = encode(out, dtype, rank, const_cast<void*>(base), dims, strides, box, element_stride,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, l2_promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return res == CUDA_SUCCESS;
}

// Encodes `desc` into `out` (encode_tensor_map's rules).
inline bool encode_tensor_map_2d(CUtensorMap* out, const TensorMap2D& desc) {
  const cuuint64_t global_dim[2] = {desc.cols, desc.rows};  // innermost first
  const cuuint64_t global_stride[1] = {desc.row_pitch_bytes};  // stride of dim 1, in bytes
  const cuuint32_t box_dim[2] = {desc.box_cols, desc.box_rows};
  return encode_tensor_map(out, desc.dtype, 2, desc.base, global_dim, global_stride, box_dim, desc.swizzle,
                           desc.l2_promotion);
}

// Swizzle mode for a given span in bytes (0 = none, 32, 64, 128).
inline CUtensorMapSwizzle swizzle_for_bytes(int span_bytes) {
  switch (span_bytes) {
    case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
    default: return CU_TENSOR_MAP_SWIZZLE_NONE;
  }
}

}  // namespace fp8gemm
