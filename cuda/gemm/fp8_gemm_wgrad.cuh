// Weight-gradient (wgrad) variants of the sm90 FP8 GEMM kernel: the same kernel body with per-row
// B scales (kPerRowScaleB: SFB loaded per stage by TMA, promotion by sfa[row] * sfb[col]), FP32
// accumulation and FP32 or bf16 output (bf16: the gradient of a bf16 parameter, rounded once from
// the FP32 accumulator as a separate convert would, without writing and re-reading it in FP32), with
//   dense:      DenseScheduler, TmaStoreEpilogue                            (launch_fp8_gemm_wgrad)
//   k-grouped:  KGroupedWgradScheduler (per-tile k-ranges from the device-side group sizes),
//               row-masking TmaStoreEpilogue (a group's M edge)             (launch_fp8_grouped_gemm_wgrad)
//
// Registry as for dense (fp8_gemm_kernel.cuh): fp8_gemm_inst_wgrad_*.cu explicitly instantiate
// wgrad_kernel_entry / kgrouped_wgrad_kernel_entry; fp8_gemm.cu sees `extern template`
// declarations only. FP8GEMM_COMPILED_WGRAD_TILES must list the same tiles as
// kCompiledWgradTiles (fp8_gemm.h).
#pragma once

#include "gemm/fp8_gemm_kernel.cuh"

#define FP8GEMM_COMPILED_WGRAD_TILES(X) X(256, 128) X(256, 96) X(128, 128) X(128, 112) X(64, 128)

namespace fp8gemm {
namespace detail {

// Per-row B scales.
template <int BLOCK_M, int BLOCK_N, OutDtype kOut, class Epi, class Scheduler>
KernelEntry make_wgrad_entry() {
  return make_kernel_entry<BLOCK_M, BLOCK_N, Epi, Scheduler, /*kPerRowScaleB=*/true>(kOut);
}

template <int BLOCK_M, int BLOCK_N, OutDtype kOut>
KernelEntry wgrad_kernel_entry() {
  return make_wgrad_entry<BLOCK_M, BLOCK_N, kOut, TmaStoreEpilogue<BLOCK_M, BLOCK_N, OutElement<kOut>>,
                          DenseScheduler<BLOCK_M, BLOCK_N>>();
}

template <int BLOCK_M, int BLOCK_N, OutDtype kOut>
KernelEntry kgrouped_wgrad_kernel_entry() {
  return make_wgrad_entry<BLOCK_M, BLOCK_N, kOut,
                          TmaStoreEpilogue<BLOCK_M, BLOCK_N, OutElement<kOut>, /*kMaskRows=*/true>,
                          KGroupedWgradScheduler<BLOCK_M, BLOCK_N>>();
}

}  // namespace detail
}  // namespace fp8gemm

// Dense and k-grouped, both output dtypes. Use at global scope.
#define FP8GEMM_INSTANTIATE_WGRAD_TILE(BM, BN)                               \
  FP8GEMM_ENTRIES_BOTH_DTYPES(template, wgrad_kernel_entry, BM, BN)          \
  FP8GEMM_ENTRIES_BOTH_DTYPES(template, kgrouped_wgrad_kernel_entry, BM, BN)

#define FP8GEMM_EXTERN_WGRAD_TILE(BM, BN)                                           \
  FP8GEMM_ENTRIES_BOTH_DTYPES(extern template, wgrad_kernel_entry, BM, BN)          \
  FP8GEMM_ENTRIES_BOTH_DTYPES(extern template, kgrouped_wgrad_kernel_entry, BM, BN)
