// Exports one build of quantize_transpose.cu under an extern "C" name (compiled with
// -Dfp8gemm=<namespace> -DSHIM_NAME=<name> -I<tree>), so that several builds link into one harness.
#include "quantize/quantize_transpose.cu"
extern "C" cudaError_t SHIM_NAME(const void* x, const void* u, int act, int64_t batch, int64_t rows, int64_t cols,
                                 int64_t rows_out, int64_t cols_out, void* q, float* s, void* qt, float* st,
                                 cudaStream_t stream) {
  fp8gemm::TransposeExtents e;
  e.batch = batch; e.rows = rows; e.cols = cols; e.rows_out = rows_out; e.cols_out = cols_out;
  return fp8gemm::launch_quantize_transpose(x, fp8gemm::InDtype::kBF16, false, e, false, q, s, qt, st, stream,
                                            act, u);
}
