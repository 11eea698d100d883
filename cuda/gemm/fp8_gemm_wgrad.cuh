// Weight-gradient (wgrad) variants of the sm90 FP8 GEMM kernel: the same kernel body with per-row
// B scales (kPerRowScaleB: SFB loaded per stage by TMA, promotion by sfa[row] * sfb[col]) and FP32
// output, with
//   dense:      DenseScheduler, TmaStoreEpilogue<f32>                       (launch_fp8_gemm_wgrad)
//   k-grouped:  KGroupedWgradScheduler (per-tile k-ranges from the device-side group sizes),
//               row-masking TmaStoreEpilogue<f32> (a group's M edge)        (launch_fp8_grouped_gemm_wgrad)
//
// Registry as for dense (fp8_gemm_kernel.cuh): fp8_gemm_inst_wgrad_*.cu explicitly instantiate
// wgrad_kernel_entry / kgrouped_wgrad_kernel_entry; fp8_gemm.cu sees `extern template`
// declarations only. FP8GEMM_COMPILED_WGRAD_TILES must list the same tiles as
// kCompiledWgradTiles (fp8_gemm.h).
#pragma once

#include "gemm/fp8_gemm_kernel.cuh"

#define FP8GEMM_COMPILED_WGRAD_TILES(X) X(256, 128) X(128, 128) X(128, 112) X(64, 128)

namespace fp8gemm {
namespace detail {

// f32 output, per-row B scales.
template <int BLOCK_M, int BLOCK_N, class Epi, class Scheduler>
KernelEntry make_wgrad_entry() {
  return make_kernel_entry<BLOCK_M, BLOCK_N, Epi, Scheduler, /*kPerRowScaleB=*/true>(OutDtype::kF32);
}

template <int BLOCK_M, int BLOCK_N>
KernelEntry wgrad_kernel_entry() {
  return make_wgrad_entry<BLOCK_M, BLOCK_N, TmaStoreEpilogue<BLOCK_M, BLOCK_N, float>,
                          DenseScheduler<BLOCK_M, BLOCK_N>>();
}

template <int BLOCK_M, int BLOCK_N>
KernelEntry kgrouped_wgrad_kernel_entry() {
  return make_wgrad_entry<BLOCK_M, BLOCK_N, TmaStoreEpilogue<BLOCK_M, BLOCK_N, float, /*kMaskRows=*/true>,
                          KGroupedWgradScheduler<BLOCK_M, BLOCK_N>>();
}

}  // namespace detail
}  // namespace fp8gemm

// Use at global scope.
#define FP8GEMM_INSTANTIATE_WGRAD_TILE(BM, BN)                 \
  namespace fp8gemm {                                         \
  namespace detail {                                          \
  template KernelEntry wgrad_kernel_entry<BM, BN>();          \
  template KernelEntry kgrouped_wgrad_kernel_entry<BM, BN>(); \
  }                                                           \
  }

#define FP8GEMM_EXTERN_WGRAD_TILE(BM, BN)                             \
  namespace fp8gemm {                                                \
  namespace detail {                                                 \
  extern template KernelEntry wgrad_kernel_entry<BM, BN>();          \
  extern template KernelEntry kgrouped_wgrad_kernel_entry<BM, BN>(); \
  }                                                                  \
  }
