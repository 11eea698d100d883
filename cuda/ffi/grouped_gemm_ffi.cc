// XLA FFI handlers of the grouped (MoE) FP8 GEMMs (cuda/gemm/fp8_gemm.h: launch_fp8_grouped_gemm).
//
//   fp8gemm_grouped_gemm         contiguous layout: a [M,K], sfa [cdiv(K,128), align(M,4)],
//                                b [G,N,K], sfb [G,cdiv(N,128),cdiv(K,128)], group_sizes s32 [G]
//                                -> d [M,N], workspace s32 [1]
//   fp8gemm_grouped_gemm_masked  masked layout: a [G,Mmax,K], sfa [cdiv(K,128), align(G*Mmax,4)],
//                                b, sfb as above, masked_m s32 [G] -> d [G,Mmax,N]
// The group sizes stay on the device (the kernels read them): no host synchronisation, so both are
// command-buffer (CUDA graph) compatible. The contiguous layout's workspace is the counter from
// which the kernel's CTAs take their tiles (GroupedGemmProblem::tile_counter; zeroed by the launch,
// on the stream). The Python side (jax_fp8gemm/grouped.py) picks the configuration and hands A's
// scales over MN-major.
#include "ffi/ffi_common.h"
#include "gemm/fp8_gemm.h"

namespace fp8gemm {
namespace {

namespace ffi = xla::ffi;
using ffi_util::cdiv;
using ffi_util::invalid;

// Checks shared by both layouts; `op` names the handler in messages. rows = rows of A / D (M, or
// G * Mmax). Fills `out`.
ffi::Error check_common(const char* op, ffi::AnyBuffer a, ffi::Buffer<ffi::F32> sfa, ffi::AnyBuffer b,
                        ffi::Buffer<ffi::F32> sfb, ffi::Buffer<ffi::S32> sizes, const ffi::AnyBuffer& d,
                        int64_t rows, int64_t k, OutDtype* out) {
  const std::string name(op);
  if (auto err = ffi_util::check_fp8_operands(name, a, b); err.failure()) return err;
  const auto bd = b.dimensions();
  if (bd.size() != 3) return invalid(name + ": b must be [G,N,K]");
  const int64_t g = bd[0], n = bd[1];
  if (bd[2] != k) return invalid(name + ": K of a and b must match");
  const auto sad = sfa.dimensions(), sbd = sfb.dimensions(), gd = sizes.dimensions();
  if (!ffi_util::is_mn_major_scales(sad, k, rows))
    return invalid(name + ": sfa must be [cdiv(K,128), align(rows,4)] (MN-major A scales)");
  if (sbd.size() != 3 || sbd[0] != g || sbd[1] != cdiv(n, 128) || sbd[2] != cdiv(k, 128))
    return invalid(name + ": sfb must be [G, cdiv(N,128), cdiv(K,128)]");
  if (gd.size() != 1 || gd[0] != g) return invalid(name + ": group sizes must be int32 [G]");
  if (auto err = ffi_util::output_dtype(name, d, out); err.failure()) return err;
  if (rows > INT32_MAX || n > INT32_MAX || k > INT32_MAX || g > INT32_MAX || g * n > INT32_MAX)
    return invalid(name + ": dimension too large");
  return ffi::Error::Success();
}

ffi::Error launch(const char* op, ffi::AnyBuffer a, ffi::Buffer<ffi::F32> sfa, ffi::AnyBuffer b,
                  ffi::Buffer<ffi::F32> sfb, ffi::Buffer<ffi::S32> sizes, ffi::AnyBuffer d, int* tile_counter,
                  OutDtype out, int64_t m, bool masked, cudaStream_t stream, int64_t block_m, int64_t block_n,
                  int64_t num_stages, int64_t num_sms, int64_t multicast, int64_t multicast_a) {
  const auto bd = b.dimensions();
  GroupedGemmProblem problem;
  problem.a = a.untyped_data();
  problem.b = b.untyped_data();
  problem.sfa = sfa.typed_data();
  problem.sfa_ld = static_cast<int>(sfa.dimensions()[1]);
  problem.sfb = sfb.typed_data();
  problem.d = d.untyped_data();
  problem.out_dtype = out;
  problem.m = static_cast<int>(m);
  problem.n = static_cast<int>(bd[1]);
  problem.k = static_cast<int>(bd[2]);
  problem.num_groups = static_cast<int>(bd[0]);
  problem.group_sizes = sizes.typed_data();
  problem.masked = masked;
  problem.tile_counter = tile_counter;
  const GemmConfig config = ffi_util::gemm_config(block_m, block_n, num_stages, num_sms, multicast, multicast_a);
  return ffi_util::cuda_error(launch_fp8_grouped_gemm(problem, config, stream), (std::string(op) + " launch").c_str());
}

ffi::Error GroupedGemm(cudaStream_t stream, ffi::AnyBuffer a, ffi::Buffer<ffi::F32> sfa, ffi::AnyBuffer b,
                       ffi::Buffer<ffi::F32> sfb, ffi::Buffer<ffi::S32> group_sizes,
                       ffi::Result<ffi::AnyBuffer> d, ffi::Result<ffi::Buffer<ffi::S32>> workspace,
                       int64_t block_m, int64_t block_n, int64_t num_stages, int64_t num_sms, int64_t multicast,
                       int64_t multicast_a) {
  constexpr const char* kOp = "grouped_gemm";
  const auto ad = a.dimensions(), bd = b.dimensions(), dd = d->dimensions();
  if (ad.size() != 2 || dd.size() != 2) return invalid("grouped_gemm: a [M,K] and d [M,N] must be 2-D");
  if (bd.size() != 3) return invalid("grouped_gemm: b must be [G,N,K]");
  const int64_t m = ad[0], k = ad[1];
  if (dd[0] != m || dd[1] != bd[1]) return invalid("grouped_gemm: d must be [M,N]");
  OutDtype out;
  if (auto err = check_common(kOp, a, sfa, b, sfb, group_sizes, *d, m, k, &out); err.failure()) return err;
  if (workspace->element_count() != 1) return invalid("grouped_gemm: the workspace must be int32 [1]");
  if (m == 0 || bd[1] == 0) return ffi::Error::Success();
  return launch(kOp, a, sfa, b, sfb, group_sizes, *d, workspace->typed_data(), out, m, /*masked=*/false, stream,
                block_m, block_n, num_stages, num_sms, multicast, multicast_a);
}

ffi::Error GroupedGemmMasked(cudaStream_t stream, ffi::AnyBuffer a, ffi::Buffer<ffi::F32> sfa, ffi::AnyBuffer b,
                             ffi::Buffer<ffi::F32> sfb, ffi::Buffer<ffi::S32> masked_m,
                             ffi::Result<ffi::AnyBuffer> d, int64_t block_m, int64_t block_n, int64_t num_stages,
                             int64_t num_sms, int64_t multicast, int64_t multicast_a) {
  constexpr const char* kOp = "grouped_gemm_masked";
  const auto ad = a.dimensions(), bd = b.dimensions(), dd = d->dimensions();
  if (ad.size() != 3 || dd.size() != 3)
    return invalid("grouped_gemm_masked: a [G,Mmax,K] and d [G,Mmax,N] must be 3-D");
  if (bd.size() != 3) return invalid("grouped_gemm_masked: b must be [G,N,K]");
  const int64_t g = ad[0], mmax = ad[1], k = ad[2];
  if (bd[0] != g) return invalid("grouped_gemm_masked: G of a and b must match");
  if (dd[0] != g || dd[1] != mmax || dd[2] != bd[1]) return invalid("grouped_gemm_masked: d must be [G,Mmax,N]");
  OutDtype out;
  if (auto err = check_common(kOp, a, sfa, b, sfb, masked_m, *d, g * mmax, k, &out); err.failure()) return err;
  if (g == 0 || mmax == 0 || bd[1] == 0) return ffi::Error::Success();
  return launch(kOp, a, sfa, b, sfb, masked_m, *d, /*tile_counter=*/nullptr, out, mmax, /*masked=*/true, stream,
                block_m, block_n, num_stages, num_sms, multicast, multicast_a);
}

// (stream, a, sfa, b, sfb, group sizes) -> d (masked) or (d, workspace) (contiguous).
auto grouped_binding_masked() {
  return ffi_util::bind_config_attrs(ffi_util::bind_gemm_operands().Arg<ffi::Buffer<ffi::S32>>().Ret<ffi::AnyBuffer>());
}
auto grouped_binding() {
  return ffi_util::bind_config_attrs(ffi_util::bind_gemm_operands()
                                         .Arg<ffi::Buffer<ffi::S32>>()
                                         .Ret<ffi::AnyBuffer>()
                                         .Ret<ffi::Buffer<ffi::S32>>());
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(kFp8GroupedGemm, GroupedGemm, grouped_binding(), {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(kFp8GroupedGemmMasked, GroupedGemmMasked, grouped_binding_masked(),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace fp8gemm
