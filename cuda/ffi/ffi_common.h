// Small helpers shared by the XLA FFI handlers: turning CUDA errors and shape mismatches into
// ffi::Error (a handler never crashes the process), and the element counts of a buffer; for the
// GEMM handlers (gemm, grouped, wgrad) also their common checks and binding.
#pragma once
#include <cstdint>
#include <string>
#include <utility>

#include <cuda_runtime.h>

#include "gemm/fp8_gemm.h"
#include "xla/ffi/api/ffi.h"

namespace fp8gemm::ffi_util {

namespace ffi = xla::ffi;

inline ffi::Error cuda_error(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(what) + ": " + cudaGetErrorString(err));
}

inline ffi::Error invalid(const std::string& msg) { return ffi::Error::InvalidArgument(msg); }

// Product of all dimensions but the last `trailing` ones.
inline int64_t leading_size(ffi::Span<const int64_t> dims, size_t trailing) {
  int64_t n = 1;
  for (size_t i = 0; i + trailing < dims.size(); ++i) n *= dims[i];
  return n;
}

inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ------------------------------------------------------------------------------------------------
// GEMM handlers. `op` names the handler in messages.
// ------------------------------------------------------------------------------------------------

// a and b arrive untyped (AnyBuffer): the kernels take e4m3 only.
inline ffi::Error check_fp8_operands(const std::string& op, const ffi::AnyBuffer& a, const ffi::AnyBuffer& b) {
  if (a.element_type() != ffi::F8E4M3FN || b.element_type() != ffi::F8E4M3FN)
    return invalid(op + ": a and b must be float8_e4m3fn");
  return ffi::Error::Success();
}

// The output dtype of the dense and grouped GEMMs, from d's element type.
inline ffi::Error output_dtype(const std::string& op, const ffi::AnyBuffer& d, OutDtype* out) {
  switch (d.element_type()) {
    case ffi::BF16: *out = OutDtype::kBF16; return ffi::Error::Success();
    case ffi::F32: *out = OutDtype::kF32; return ffi::Error::Success();
    default: return invalid(op + ": d must be bfloat16 or float32");
  }
}

// MN-major 1x128 scales as TMA loads them: [cdiv(k,128), ld], ld >= rows and a multiple of 4
// (16-byte row pitch).
inline bool is_mn_major_scales(ffi::Span<const int64_t> dims, int64_t k, int64_t rows) {
  return dims.size() == 2 && dims[0] == cdiv(k, 128) && dims[1] >= rows && dims[1] % 4 == 0;
}

inline GemmConfig gemm_config(int64_t block_m, int64_t block_n, int64_t num_stages, int64_t num_sms,
                              int64_t multicast, int64_t multicast_a) {
  return GemmConfig{int(block_m), int(block_n), int(num_stages), int(num_sms), int(multicast), int(multicast_a)};
}

// Every GEMM handler starts with (stream, a, sfa, b, sfb) ...
inline auto bind_gemm_operands() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<cudaStream_t>>()
      .Arg<ffi::AnyBuffer>()          // a
      .Arg<ffi::Buffer<ffi::F32>>()   // sfa
      .Arg<ffi::AnyBuffer>()          // b
      .Arg<ffi::Buffer<ffi::F32>>();  // sfb
}

// ... and ends with the attributes of the configuration (GemmConfig: tile, pipeline, grid and
// cluster; jax_fp8gemm/gemm_config.py's GemmConfig.attributes() gives all six).
template <class Binding>
auto bind_config_attrs(Binding&& binding) {
  return std::forward<Binding>(binding)
      .template Attr<int64_t>("block_m")
      .template Attr<int64_t>("block_n")
      .template Attr<int64_t>("num_stages")
      .template Attr<int64_t>("num_sms")
      .template Attr<int64_t>("multicast")
      .template Attr<int64_t>("multicast_a");
}

// The four results of a fused quantize + transpose: q, s, qt, st.
template <class Binding>
auto bind_transpose_outputs(Binding&& binding) {
  return std::forward<Binding>(binding)
      .template Ret<ffi::AnyBuffer>()           // q
      .template Ret<ffi::Buffer<ffi::F32>>()    // s
      .template Ret<ffi::AnyBuffer>()           // qt
      .template Ret<ffi::Buffer<ffi::F32>>();   // st
}

}  // namespace fp8gemm::ffi_util
