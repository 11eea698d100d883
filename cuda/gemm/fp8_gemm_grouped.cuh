// Grouped (MoE) variants of the sm90 FP8 GEMM kernel: the same kernel body with the
// GroupedScheduler (scheduler.cuh: contiguous and masked layouts, one kernel for both, chosen by
// a runtime flag) and the row-masking TMA-store epilogue (epilogue.cuh: kMaskRows).
//
// Registry as for dense (fp8_gemm_kernel.cuh): fp8_gemm_inst_grouped_*.cu explicitly instantiate
// grouped_kernel_entry<BM, BN, out>; fp8_gemm.cu sees `extern template` declarations only.
// FP8GEMM_COMPILED_GROUPED_TILES must list the same tiles as kCompiledGroupedTiles (fp8_gemm.h).
#pragma once

#include "gemm/fp8_gemm_kernel.cuh"

#define FP8GEMM_COMPILED_GROUPED_TILES(X) X(128, 128) X(64, 128)

namespace fp8gemm {
namespace detail {

template <int BLOCK_M, int BLOCK_N, OutDtype kOut>
KernelEntry grouped_kernel_entry() {
  using OutT = typename std::conditional<kOut == OutDtype::kBF16, __nv_bfloat16, float>::type;
  using Epi = TmaStoreEpilogue<BLOCK_M, BLOCK_N, OutT, /*kMaskRows=*/true>;
  using Traits = GemmTraits<BLOCK_M, BLOCK_N, Epi>;
  KernelEntry e;
  e.block_m = BLOCK_M;
  e.block_n = BLOCK_N;
  e.out = kOut;
  e.fn = reinterpret_cast<const void*>(
      &sm90_fp8_gemm_kernel<BLOCK_M, BLOCK_N, Epi, GroupedScheduler<BLOCK_M, BLOCK_N>>);
  e.num_threads = Traits::kNumThreads;
  e.smem_fixed = Traits::kSmemD;
  e.smem_per_stage = Traits::kSmemPerStage;
  e.d_box_cols = Epi::kAtomCols;
  e.d_box_rows = Epi::kBoxRows;
  e.d_swizzle_bytes = Epi::kAtomBytes;
  e.out_elem_bytes = Epi::kElemBytes;
  return e;
}

}  // namespace detail
}  // namespace fp8gemm

// Use at global scope.
#define FP8GEMM_INSTANTIATE_GROUPED_TILE(BM, BN)                                       \
  namespace fp8gemm {                                                                 \
  namespace detail {                                                                  \
  template KernelEntry grouped_kernel_entry<BM, BN, OutDtype::kBF16>();               \
  template KernelEntry grouped_kernel_entry<BM, BN, OutDtype::kF32>();                \
  }                                                                                   \
  }

#define FP8GEMM_EXTERN_GROUPED_TILE(BM, BN)                                            \
  namespace fp8gemm {                                                                 \
  namespace detail {                                                                  \
  extern template KernelEntry grouped_kernel_entry<BM, BN, OutDtype::kBF16>();        \
  extern template KernelEntry grouped_kernel_entry<BM, BN, OutDtype::kF32>();         \
  }                                                                                   \
  }
