// XLA FFI handlers of the quantization kernels. Thin: check what XLA hands over, launch, report.
#include <utility>
#include <vector>

#include "ffi/ffi_common.h"
#include "quantize/quantize.h"

namespace fp8gemm {
namespace {

namespace ffi = xla::ffi;
using ffi_util::cdiv;
using ffi_util::invalid;

constexpr int64_t kGroup = 128;

ffi::ErrorOr<InDtype> input_dtype(const ffi::AnyBuffer& x) {
  switch (x.element_type()) {
    case ffi::F32: return InDtype::kF32;
    case ffi::BF16: return InDtype::kBF16;
    case ffi::F16: return InDtype::kF16;
    default: return ffi::Error::InvalidArgument("x must be float32, bfloat16 or float16");
  }
}

// The length of the rows of FP8 output `out`, whose dims must be `want` but for the last, which may
// be longer by zero padding (quantize.h padding_ok); -1 if it does not fit.
int64_t padded_length(const ffi::AnyBuffer& out, const std::vector<int64_t>& want) {
  const auto dims = out.dimensions();
  if (out.element_type() != ffi::F8E4M3FN || want.empty() || dims.size() != want.size()) return -1;
  for (size_t i = 0; i + 1 < want.size(); ++i)
    if (dims[i] != want[i]) return -1;
  return padding_ok(want.back(), dims.back()) ? dims.back() : -1;
}

std::vector<int64_t> dims_of(const ffi::AnyBuffer& x) { return {x.dimensions().begin(), x.dimensions().end()}; }

ffi::Error QuantizeRowwise(cudaStream_t stream, ffi::AnyBuffer x,
                           ffi::Result<ffi::AnyBuffer> q, ffi::Result<ffi::Buffer<ffi::F32>> s,
                           bool pow2_scale) {
  auto dtype = input_dtype(x);
  if (dtype.has_error()) return dtype.error();
  const auto dims = x.dimensions();
  if (dims.size() == 0) return invalid("quantize_rowwise: x must have rank >= 1");
  const int64_t k = dims.back(), rows = ffi_util::leading_size(dims, 1);
  const int64_t k_out = padded_length(*q, dims_of(x));
  if (k_out < 0)
    return invalid("quantize_rowwise: q must be float8_e4m3fn of x's shape (K zero-padded within its last group)");
  if (s->element_count() != rows * cdiv(k, kGroup))
    return invalid("quantize_rowwise: s must hold cdiv(K, 128) * rows scales (MN-major)");
  return ffi_util::cuda_error(
      launch_quantize_rowwise(x.untyped_data(), dtype.value(), rows, k, k_out, pow2_scale,
                              q->untyped_data(), s->typed_data(), stream),
      "quantize_rowwise launch");
}

ffi::Error QuantizeBlockwise(cudaStream_t stream, ffi::AnyBuffer x,
                             ffi::Result<ffi::AnyBuffer> q, ffi::Result<ffi::Buffer<ffi::F32>> s,
                             bool pow2_scale) {
  auto dtype = input_dtype(x);
  if (dtype.has_error()) return dtype.error();
  const auto dims = x.dimensions();
  if (dims.size() < 2) return invalid("quantize_blockwise: x must have rank >= 2");
  const int64_t n = dims[dims.size() - 2], k = dims.back(), batch = ffi_util::leading_size(dims, 2);
  const int64_t k_out = padded_length(*q, dims_of(x));
  if (k_out < 0)
    return invalid("quantize_blockwise: q must be float8_e4m3fn of x's shape (K zero-padded within its last group)");
  if (s->element_count() != batch * cdiv(n, kGroup) * cdiv(k, kGroup))
    return invalid("quantize_blockwise: s must hold batch * cdiv(N,128) * cdiv(K,128) scales");
  return ffi_util::cuda_error(
      launch_quantize_blockwise(x.untyped_data(), dtype.value(), batch, n, k, k_out, pow2_scale,
                                q->untyped_data(), s->typed_data(), stream),
      "quantize_blockwise launch");
}

// Checks of the fused quantize + transpose outputs for x [..., rows, cols]: q [..., rows, cols_out]
// and qt [..., cols, rows_out] (zero-padded, quantize.h); fills the sizes. q and s both empty (0
// elements): only the transposed outputs are wanted (*straight = false; blockwise only).
ffi::Error check_transpose_outputs(const std::string& op, const ffi::AnyBuffer& x, const ffi::AnyBuffer& q,
                                   const ffi::AnyBuffer& qt, int64_t s_elems, int64_t st_elems, bool blockwise,
                                   TransposeExtents* e, bool* straight) {
  const auto dims = x.dimensions();
  if (dims.size() < 2) return invalid(op + ": x must have rank >= 2");
  e->rows = dims[dims.size() - 2], e->cols = dims.back();
  e->batch = ffi_util::leading_size(dims, 2);
  *straight = !(x.element_count() > 0 && q.element_count() == 0 && s_elems == 0);
  std::vector<int64_t> t_dims = dims_of(x);
  std::swap(t_dims[t_dims.size() - 2], t_dims.back());
  e->cols_out = *straight ? padded_length(q, dims_of(x)) : e->cols;
  e->rows_out = padded_length(qt, t_dims);
  if (e->cols_out < 0 || e->rows_out < 0 || (!*straight && q.element_type() != ffi::F8E4M3FN))
    return invalid(op + ": q and qt must be float8_e4m3fn of x's shape and its transpose (the last axis "
                        "zero-padded within its last group; q may be empty)");
  const int64_t rows = e->rows, cols = e->cols;
  const int64_t s_count = blockwise ? cdiv(rows, kGroup) * cdiv(cols, kGroup) : rows * cdiv(cols, kGroup);
  const int64_t st_count = blockwise ? s_count : cols * cdiv(rows, kGroup);
  if ((*straight && s_elems != e->batch * s_count) || st_elems != e->batch * st_count)
    return invalid(op + ": s / st hold the wrong number of scales");
  if (!*straight && !blockwise) return invalid(op + ": q and s may be empty in blockwise mode only");
  return ffi::Error::Success();
}

ffi::Error QuantizeTranspose(cudaStream_t stream, ffi::AnyBuffer x,
                             ffi::Result<ffi::AnyBuffer> q, ffi::Result<ffi::Buffer<ffi::F32>> s,
                             ffi::Result<ffi::AnyBuffer> qt, ffi::Result<ffi::Buffer<ffi::F32>> st,
                             bool pow2_scale, bool blockwise, int32_t activation) {
  const std::string op = "quantize_transpose";
  auto dtype = input_dtype(x);
  if (dtype.has_error()) return dtype.error();
  if (activation != 0 && (blockwise || activation != 1)) return invalid(op + ": activation must be 0 or 1 (gelu), row-wise");
  TransposeExtents e;
  bool straight = true;
  if (auto err = check_transpose_outputs(op, x, *q, *qt, s->element_count(), st->element_count(), blockwise,
                                         &e, &straight);
      err.failure())
    return err;
  return ffi_util::cuda_error(
      launch_quantize_transpose(x.untyped_data(), dtype.value(), blockwise, e, pow2_scale,
                                straight ? q->untyped_data() : nullptr, straight ? s->typed_data() : nullptr,
                                qt->untyped_data(), st->typed_data(), stream, activation),
      (op + " launch").c_str());
}

// The gradient of a fused activation: quantizes g * act'(u) (row-wise), g and u of one shape and dtype.
ffi::Error QuantizeTransposeActGrad(cudaStream_t stream, ffi::AnyBuffer g, ffi::AnyBuffer u,
                                    ffi::Result<ffi::AnyBuffer> q, ffi::Result<ffi::Buffer<ffi::F32>> s,
                                    ffi::Result<ffi::AnyBuffer> qt, ffi::Result<ffi::Buffer<ffi::F32>> st,
                                    bool pow2_scale, int32_t activation) {
  const std::string op = "quantize_transpose_act_grad";
  auto dtype = input_dtype(g);
  if (dtype.has_error()) return dtype.error();
  if (u.element_type() != g.element_type() || u.dimensions().size() != g.dimensions().size() ||
      u.element_count() != g.element_count())
    return invalid(op + ": u must have g's shape and dtype");
  if (activation != 1) return invalid(op + ": activation must be 1 (gelu)");
  TransposeExtents e;
  bool straight = true;
  if (auto err = check_transpose_outputs(op, g, *q, *qt, s->element_count(), st->element_count(),
                                         /*blockwise=*/false, &e, &straight);
      err.failure())
    return err;
  return ffi_util::cuda_error(
      launch_quantize_transpose(g.untyped_data(), dtype.value(), /*blockwise=*/false, e, pow2_scale,
                                q->untyped_data(), s->typed_data(),
                                qt->untyped_data(), st->typed_data(), stream, /*activation=*/2, u.untyped_data()),
      (op + " launch").c_str());
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kQuantizeRowwise, QuantizeRowwise,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<bool>("pow2_scale"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(kQuantizeBlockwise, QuantizeBlockwise,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<bool>("pow2_scale"),
                              {ffi::Traits::kCmdBufferCompatible});


XLA_FFI_DEFINE_HANDLER_SYMBOL(kQuantizeTranspose, QuantizeTranspose,
                              ffi_util::bind_transpose_outputs(ffi::Ffi::Bind()
                                                                   .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                                                   .Arg<ffi::AnyBuffer>())  // x
                                  .Attr<bool>("pow2_scale")
                                  .Attr<bool>("blockwise")
                                  .Attr<int32_t>("activation"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(kQuantizeTransposeActGrad, QuantizeTransposeActGrad,
                              ffi_util::bind_transpose_outputs(ffi::Ffi::Bind()
                                                                   .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                                                   .Arg<ffi::AnyBuffer>()   // g
                                                                   .Arg<ffi::AnyBuffer>())  // u
                                  .Attr<bool>("pow2_scale")
                                  .Attr<int32_t>("activation"),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace fp8gemm
