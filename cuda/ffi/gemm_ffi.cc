// XLA FFI handler of the dense FP8 GEMM: d[M,N] = (a * sfa) @ (b * sfb)^T.
// The Python side picks the configuration (jax_fp8gemm/gemm.py) and passes it as attributes, and
// hands over A's scales already MN-major ([cdiv(K,128), M], any row pitch >= M) so TMA can load them.
#include "ffi/ffi_common.h"
#include "gemm/fp8_gemm.h"

namespace fp8gemm {
namespace {

namespace ffi = xla::ffi;
using ffi_util::cdiv;
using ffi_util::invalid;

ffi::Error Fp8Gemm(cudaStream_t stream, ffi::AnyBuffer a, ffi::Buffer<ffi::F32> sfa,
                   ffi::AnyBuffer b, ffi::Buffer<ffi::F32> sfb, ffi::Result<ffi::AnyBuffer> d,
                   int64_t block_m, int64_t block_n, int64_t num_stages, int64_t num_sms,
                   int64_t multicast, int64_t multicast_a, int64_t k_splits) {
  const std::string op = "gemm";
  if (auto err = ffi_util::check_fp8_operands(op, a, b); err.failure()) return err;
  const auto ad = a.dimensions(), bd = b.dimensions(), dd = d->dimensions();
  if (ad.size() != 2 || bd.size() != 2 || dd.size() != 2)
    return invalid("gemm: a [M,K], b [N,K] and d [M,N] must be 2-D");
  const int64_t m = ad[0], k = ad[1], n = bd[0];
  if (bd[1] != k || dd[0] != m || dd[1] != n) return invalid("gemm: mismatched M, N or K");
  const auto sad = sfa.dimensions(), sbd = sfb.dimensions();
  if (sad.size() != 2 || sad[0] != cdiv(k, 128) || sad[1] < m)
    return invalid("gemm: sfa must be [cdiv(K,128), M] (MN-major, rows may be padded)");
  if (sbd.size() != 2 || sbd[0] != cdiv(n, 128) || sbd[1] != cdiv(k, 128))
    return invalid("gemm: sfb must be [cdiv(N,128), cdiv(K,128)]");
  OutDtype out = OutDtype::kBF16;
  if (auto err = ffi_util::output_dtype(op, *d, &out); err.failure()) return err;
  if (m == 0 || n == 0) return ffi::Error::Success();
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return invalid("gemm: dimension too large");

  GemmProblem problem{a.untyped_data(), b.untyped_data(), sfa.typed_data(), int(sad[1]),
                      sfb.typed_data(), d->untyped_data(), out, int(m), int(n), int(k)};
  GemmConfig config = ffi_util::gemm_config(block_m, block_n, num_stages, num_sms, multicast, multicast_a);
  config.k_splits = int(k_splits);
  return ffi_util::cuda_error(launch_fp8_gemm(problem, config, stream), "gemm launch");
}

}  // namespace

// The dense GEMM's configuration has one attribute more: k_splits (split-K of the decode tiles).
XLA_FFI_DEFINE_HANDLER_SYMBOL(kFp8Gemm, Fp8Gemm,
                              ffi_util::bind_config_attrs(ffi_util::bind_gemm_operands().Ret<ffi::AnyBuffer>())
                                  .Attr<int64_t>("k_splits"),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace fp8gemm
