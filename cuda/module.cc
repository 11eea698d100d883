// The Python module jax_fp8gemm._cuda: a dict of XLA FFI handler capsules, registered for the
// "CUDA" platform by jax_fp8gemm/_kernels.py at import, and the one device fact the configuration
// pickers need that JAX does not give (how many split-K clusters fit at once).
#include <nanobind/nanobind.h>

#include "xla/ffi/api/c_api.h"

namespace nb = nanobind;

namespace fp8gemm {
extern "C" XLA_FFI_Error* kQuantizeRowwise(XLA_FFI_CallFrame*);
extern "C" XLA_FFI_Error* kQuantizeBlockwise(XLA_FFI_CallFrame*);
extern "C" XLA_FFI_Error* kQuantizeTranspose(XLA_FFI_CallFrame*);
extern "C" XLA_FFI_Error* kQuantizeTransposeActGrad(XLA_FFI_CallFrame*);
extern "C" XLA_FFI_Error* kFp8Gemm(XLA_FFI_CallFrame*);
extern "C" XLA_FFI_Error* kFp8GroupedGemm(XLA_FFI_CallFrame*);
extern "C" XLA_FFI_Error* kFp8GroupedGemmMasked(XLA_FFI_CallFrame*);
extern "C" XLA_FFI_Error* kFp8GemmWgrad(XLA_FFI_CallFrame*);
extern "C" XLA_FFI_Error* kFp8GroupedGemmWgrad(XLA_FFI_CallFrame*);
int max_active_split_k_clusters(int block_m, int block_n, int cluster_size);  // gemm/fp8_gemm.h
}  // namespace fp8gemm

namespace {
template <typename Fn>
nb::capsule capsule(Fn* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}
}  // namespace

NB_MODULE(_cuda, m) {
  m.def("registrations", []() {
    nb::dict d;
    d["fp8gemm_quantize_rowwise"] = capsule(fp8gemm::kQuantizeRowwise);
    d["fp8gemm_quantize_blockwise"] = capsule(fp8gemm::kQuantizeBlockwise);
    d["fp8gemm_quantize_transpose"] = capsule(fp8gemm::kQuantizeTranspose);
    d["fp8gemm_quantize_transpose_act_grad"] = capsule(fp8gemm::kQuantizeTransposeActGrad);
    d["fp8gemm_gemm"] = capsule(fp8gemm::kFp8Gemm);
    d["fp8gemm_grouped_gemm"] = capsule(fp8gemm::kFp8GroupedGemm);
    d["fp8gemm_grouped_gemm_masked"] = capsule(fp8gemm::kFp8GroupedGemmMasked);
    d["fp8gemm_gemm_wgrad"] = capsule(fp8gemm::kFp8GemmWgrad);
    d["fp8gemm_grouped_gemm_wgrad"] = capsule(fp8gemm::kFp8GroupedGemmWgrad);
    return d;
  });
  m.def("max_active_split_k_clusters", &fp8gemm::max_active_split_k_clusters, nb::arg("block_m"), nb::arg("block_n"),
        nb::arg("cluster_size"));
}
