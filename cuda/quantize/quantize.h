// Host API of the quantization kernels (1x128 row-wise groups, 128x128 blocks).
// The math is exactly jax_fp8gemm/reference.py's, so the outputs are bitwise equal to it:
//   amax  = max |x| over the group (NaN propagates)
//   s     = amax * (1 / 448), raised to FLT_MIN when smaller (an all-zero group gets a finite scale),
//           optionally rounded up to a power of two (UE8M0-compatible)
//   q     = saturate_to_e4m3(x * (1 / s))  (round to nearest even; |v| > 448 saturates to 448)
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

namespace fp8gemm {

enum class InDtype : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

// The FP8 outputs' rows may be longer than the input's: k_out > k pads each row with zeros (the
// padding a GEMM's contracted axis needs: TMA takes rows of a multiple of 16 bytes, and rows on
// 32-byte sectors load faster), so the caller never copies x to pad it. Zeros leave every scale
// as it is; the padding stays inside the row's last 128-group, so the scale shapes do not change.
// Rows of a multiple of 8 elements are stored 8 bytes at a time, so they pad to a multiple of 8.
inline bool padding_ok(int64_t k, int64_t k_out) {
  return k_out == k || (k_out > k && (k_out + 127) / 128 == (k + 127) / 128 && (k % 8 != 0 || k_out % 8 == 0));
}

// x [rows, k] -> q [rows, k_out] e4m3, s f32 MN-major [cdiv(k, 128), rows] (s[kb * rows + r] = scale
// of row r, group kb: the layout the GEMMs load).
cudaError_t launch_quantize_rowwise(const void* x, InDtype dtype, int64_t rows, int64_t k, int64_t k_out,
                                    bool pow2_scale, void* q, float* s, cudaStream_t stream);

// x [batch, n, k] -> q [batch, n, k_out] e4m3, s [batch, cdiv(n, 128), cdiv(k, 128)] f32.
cudaError_t launch_quantize_blockwise(const void* x, InDtype dtype, int64_t batch, int64_t n,
                                      int64_t k, int64_t k_out, bool pow2_scale, void* q, float* s,
                                      cudaStream_t stream);

// The shape of a fused quantize + transpose call: x [batch, rows, cols]; q's rows cols_out long,
// qt's rows_out (zero-padded as above).
struct TransposeExtents {
  int64_t batch = 0, rows = 0, cols = 0, rows_out = 0, cols_out = 0;
};

// Fused quantize + transpose, x [batch, rows, cols] -> q [batch, rows, cols_out] and its transpose
// qt [batch, cols, rows_out], e4m3, in one pass (quantize_transpose.cu):
//   row-wise (blockwise = false): q, s = rowwise(x), qt, st = rowwise(x^T), the scales MN-major:
//                                 s  [batch, cdiv(cols, 128), rows]  (s[.., kb, r] = scale of row r, group kb)
//                                 st [batch, cdiv(rows, 128), cols]
//   blockwise: q, s = blockwise(x) s [batch, cdiv(rows,128), cdiv(cols,128)]; qt = q^T, st = s^T.
// Blockwise, q and s may both be null: then only qt and st are written (a weight needed in its
// transposed orientation only).
// activation (row-wise only; quantize_math.cuh Act): 0 = none, 1 = quantize gelu(x),
// 2 = quantize x * gelu'(u) with u [batch, rows, cols] of x's dtype (else unused, may be null).
cudaError_t launch_quantize_transpose(const void* x, InDtype dtype, bool blockwise, const TransposeExtents& e,
                                      bool pow2_scale, void* q, float* s, void* qt, float* st,
                                      cudaStream_t stream, int activation = 0, const void* u = nullptr);

}  // namespace fp8gemm
