// XLA FFI handlers of the weight-gradient FP8 GEMMs (cuda/gemm/fp8_gemm.h: launch_fp8_gemm_wgrad,
// launch_fp8_grouped_gemm_wgrad). Both operands carry 1x128 scales along the token axis T (the
// contracted one), handed over MN-major by the Python side (jax_fp8gemm/wgrad.py); FP32 or bf16
// output (the result buffer's dtype).
//
//   fp8gemm_gemm_wgrad          a [M,T], sfa [cdiv(T,128), align(M,4)], b [N,T],
//                               sfb [cdiv(T,128), align(N,4)], sfa_ops, sfb_ops -> d f32/bf16 [M,N]
//                               (the scale operands of the 256x96 tile, WgradGemmProblem::sfa_ops /
//                               sfb_ops: u32 [cdiv(T,128), align(M,4)] and bf16 [cdiv(T,128), N, 8];
//                               empty for the other tiles)
//   fp8gemm_grouped_gemm_wgrad  the same plus the unpadded group sizes s32 [G] (read on the device
//                               only) -> d f32/bf16 [G,M,N]
// No host synchronisation: both are command-buffer (CUDA graph) compatible.
#include "ffi/ffi_common.h"
#include "gemm/fp8_gemm.h"

namespace fp8gemm {
namespace {

namespace ffi = xla::ffi;
using ffi_util::invalid;

// Checks shared by both handlers; fills `ops` (all but d). `op` names the handler in messages.
ffi::Error check_operands(const std::string& op, ffi::AnyBuffer a, ffi::Buffer<ffi::F32> sfa, ffi::AnyBuffer b,
                          ffi::Buffer<ffi::F32> sfb, ffi::Buffer<ffi::U32> sfa_ops, ffi::Buffer<ffi::BF16> sfb_ops,
                          WgradGemmProblem* ops) {
  if (auto err = ffi_util::check_fp8_operands(op, a, b); err.failure()) return err;
  const auto ad = a.dimensions(), bd = b.dimensions();
  if (ad.size() != 2 || bd.size() != 2) return invalid(op + ": a [M,T] and b [N,T] must be 2-D");
  const int64_t m = ad[0], t = ad[1], n = bd[0];
  if (bd[1] != t) return invalid(op + ": T (last axis) of a and b must match");
  const auto sad = sfa.dimensions(), sbd = sfb.dimensions();
  if (!ffi_util::is_mn_major_scales(sad, t, m))
    return invalid(op + ": sfa must be [cdiv(T,128), align(M,4)] (MN-major A scales)");
  if (!ffi_util::is_mn_major_scales(sbd, t, n))
    return invalid(op + ": sfb must be [cdiv(T,128), align(N,4)] (MN-major B scales)");
  if (m > INT32_MAX || n > INT32_MAX || t > INT32_MAX || sad[1] > INT32_MAX || sbd[1] > INT32_MAX)
    return invalid(op + ": dimension too large");
  ops->a = a.untyped_data();
  ops->b = b.untyped_data();
  ops->sfa = sfa.typed_data();
  ops->sfa_ld = static_cast<int>(sad[1]);
  ops->sfb = sfb.typed_data();
  ops->sfb_ld = static_cast<int>(sbd[1]);
  ops->m = static_cast<int>(m);
  ops->n = static_cast<int>(n);
  ops->t = static_cast<int>(t);
  if (sfa_ops.element_count() > 0 || sfb_ops.element_count() > 0) {
    const auto ad_ops = sfa_ops.dimensions(), bd_ops = sfb_ops.dimensions();
    if (ad_ops.size() != 2 || ad_ops[0] != sad[0] || ad_ops[1] != sad[1])
      return invalid(op + ": sfa_ops must be uint32 of sfa's shape [cdiv(T,128), align(M,4)] (or both empty)");
    if (bd_ops.size() != 3 || bd_ops[0] != (t + 127) / 128 || bd_ops[1] != n || bd_ops[2] != 8)
      return invalid(op + ": sfb_ops must be bf16 [cdiv(T,128), N, 8] (or both empty)");
    ops->sfa_ops = sfa_ops.typed_data();
    ops->sfb_ops = sfb_ops.typed_data();
  }
  return ffi::Error::Success();
}

ffi::Error GemmWgrad(cudaStream_t stream, ffi::AnyBuffer a, ffi::Buffer<ffi::F32> sfa, ffi::AnyBuffer b,
                     ffi::Buffer<ffi::F32> sfb, ffi::Buffer<ffi::U32> sfa_ops, ffi::Buffer<ffi::BF16> sfb_ops,
                     ffi::Result<ffi::AnyBuffer> d,
                     int64_t block_m, int64_t block_n, int64_t num_stages, int64_t num_sms, int64_t multicast,
                     int64_t multicast_a) {
  const std::string op = "gemm_wgrad";
  WgradGemmProblem p{};
  if (auto err = check_operands(op, a, sfa, b, sfb, sfa_ops, sfb_ops, &p); err.failure()) return err;
  if (auto err = ffi_util::output_dtype(op, *d, &p.out_dtype); err.failure()) return err;
  const auto dd = d->dimensions();
  if (dd.size() != 2 || dd[0] != p.m || dd[1] != p.n) return invalid(op + ": d must be [M,N]");
  if (p.m == 0 || p.n == 0) return ffi::Error::Success();
  if (p.t == 0) return invalid(op + ": T must be > 0");
  p.d = d->untyped_data();
  const GemmConfig config = ffi_util::gemm_config(block_m, block_n, num_stages, num_sms, multicast, multicast_a);
  return ffi_util::cuda_error(launch_fp8_gemm_wgrad(p, config, stream), "gemm_wgrad launch");
}

ffi::Error GroupedGemmWgrad(cudaStream_t stream, ffi::AnyBuffer a, ffi::Buffer<ffi::F32> sfa, ffi::AnyBuffer b,
                            ffi::Buffer<ffi::F32> sfb, ffi::Buffer<ffi::U32> sfa_ops,
                            ffi::Buffer<ffi::BF16> sfb_ops, ffi::Buffer<ffi::S32> group_sizes,
                            ffi::Result<ffi::AnyBuffer> d, int64_t block_m, int64_t block_n,
                            int64_t num_stages, int64_t num_sms, int64_t multicast, int64_t multicast_a) {
  const std::string op = "grouped_gemm_wgrad";
  WgradGemmProblem ops{};
  if (auto err = check_operands(op, a, sfa, b, sfb, sfa_ops, sfb_ops, &ops); err.failure()) return err;
  const auto gd = group_sizes.dimensions(), dd = d->dimensions();
  if (gd.size() != 1) return invalid(op + ": group sizes must be int32 [G]");
  const int64_t g = gd[0];
  if (auto err = ffi_util::output_dtype(op, *d, &ops.out_dtype); err.failure()) return err;
  if (dd.size() != 3 || dd[0] != g || dd[1] != ops.m || dd[2] != ops.n)
    return invalid(op + ": d must be [G,M,N]");
  if (g * static_cast<int64_t>(ops.m) > INT32_MAX) return invalid(op + ": G * M too large");
  if (g == 0 || ops.m == 0 || ops.n == 0) return ffi::Error::Success();
  if (ops.t == 0) return invalid(op + ": T must be > 0");
  GroupedWgradGemmProblem p{ops.a, ops.b, ops.sfa, ops.sfa_ld, ops.sfb,    ops.sfb_ld,
                            d->untyped_data(), ops.m, ops.n, ops.t, int(g), group_sizes.typed_data(),
                            ops.out_dtype, ops.sfa_ops, ops.sfb_ops};
  const GemmConfig config = ffi_util::gemm_config(block_m, block_n, num_stages, num_sms, multicast, multicast_a);
  return ffi_util::cuda_error(launch_fp8_grouped_gemm_wgrad(p, config, stream), "grouped_gemm_wgrad launch");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kFp8GemmWgrad, GemmWgrad,
                              ffi_util::bind_config_attrs(ffi_util::bind_gemm_operands()
                                                              .Arg<ffi::Buffer<ffi::U32>>()   // sfa_ops
                                                              .Arg<ffi::Buffer<ffi::BF16>>()  // sfb_ops
                                                              .Ret<ffi::AnyBuffer>()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(kFp8GroupedGemmWgrad, GroupedGemmWgrad,
                              ffi_util::bind_config_attrs(ffi_util::bind_gemm_operands()
                                                              .Arg<ffi::Buffer<ffi::U32>>()   // sfa_ops
                                                              .Arg<ffi::Buffer<ffi::BF16>>()  // sfb_ops
                                                              .Arg<ffi::Buffer<ffi::S32>>()
                                                              .Ret<ffi::AnyBuffer>()),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace fp8gemm
