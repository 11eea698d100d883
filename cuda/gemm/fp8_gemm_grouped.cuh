// Grouped (MoE) variants of the sm90 FP8 GEMM kernel: the same kernel body with the
// GroupedScheduler (scheduler.cuh: contiguous and masked layouts, one kernel for both, chosen by
// a runtime flag) and the row-masking TMA-store epilogue (epilogue.cuh: kMaskRows).
//
// Registry as for dense (fp8_gemm_kernel.cuh): fp8_gemm_inst_grouped_*.cu explicitly instantiate
// grouped_kernel_entry<BM, BN, out>; fp8_gemm.cu sees `extern template` declarations only.
// FP8GEMM_COMPILED_GROUPED_TILES must list the same tiles as kCompiledGroupedTiles (fp8_gemm.h).
#pragma once

#include "gemm/fp8_gemm_kernel.cuh"

#define FP8GEMM_COMPILED_GROUPED_TILES(X) X(256, 128) X(128, 128) X(64, 128)

namespace fp8gemm {
namespace detail {

template <int BLOCK_M, int BLOCK_N, OutDtype kOut>
KernelEntry grouped_kernel_entry() {
  using Epi = TmaStoreEpilogue<BLOCK_M, BLOCK_N, OutElement<kOut>, /*kMaskRows=*/true>;
  return make_kernel_entry<BLOCK_M, BLOCK_N, Epi, GroupedScheduler<BLOCK_M, BLOCK_N>>(kOut);
}

}  // namespace detail
}  // namespace fp8gemm

// Use at global scope.
#define FP8GEMM_INSTANTIATE_GROUPED_TILE(BM, BN) FP8GEMM_ENTRIES_BOTH_DTYPES(template, grouped_kernel_entry, BM, BN)
#define FP8GEMM_EXTERN_GROUPED_TILE(BM, BN) FP8GEMM_ENTRIES_BOTH_DTYPES(extern template, grouped_kernel_entry, BM, BN)
