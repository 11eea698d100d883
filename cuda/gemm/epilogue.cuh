// Epilogues of the sm90 FP8 GEMM kernel: they take the FP32 tile a math warpgroup accumulated in
// registers and write it to global memory.
//
// Contract with the kernel body (fp8_gemm_kernel.cuh):
//   * `Epilogue::kSmemBytes`  shared memory the epilogue owns (placed first, 1024-byte aligned).
//   * `Epilogue::Params`      trivially copyable kernel argument (extra pointers a fused epilogue
//                             needs; empty here, the output goes through the `tmap_d` tensor map).
//   * `store(acc, ...)`       called by all 128 threads of ONE math warpgroup for one 64-row slice
//                             of the tile that warpgroup owns (slice = wg, or 2 + wg for the second
//                             wave of a 256-row tile; slices of one warpgroup are stored one after
//                             the other). Warpgroups call it independently (no cross-warpgroup
//                             synchronisation); named barrier 1 + warpgroup index is reserved for it.
//   * `finish(...)`           called once per math thread after the last tile (drains async stores).
// Accumulator layout (WGMMA m64nN, per warp w of the warpgroup, lane t):
//   acc[4*i + 0/1] -> (row 16*w + t/4,     cols 8*i + 2*(t%4) + 0/1)
//   acc[4*i + 2/3] -> (row 16*w + t/4 + 8, cols 8*i + 2*(t%4) + 0/1)
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "common/sm90_ptx.cuh"
#include "gemm/scheduler.cuh"

namespace fp8gemm {

struct EmptyEpilogueParams {};

// Rows of the tile owned by one math warpgroup (WGMMA M).
constexpr int kRowsPerMathWarpgroup = 64;

// Output through shared memory and TMA stores, bf16 (stmatrix) or f32 (st.shared.v2).
//
// Shared-memory layout: the kStagedRows x BLOCK_N staged tile (all BLOCK_M rows, or one 128-row
// wave: see kStagedRows) is cut into column "atoms" of kAtomBytes bytes (128 or 64: the widest
// that divides a tile row; else the whole row, unswizzled: kRowAtom). Atom a is a dense
// [kStagedRows][kAtomBytes] array with the TMA swizzle of the same span applied, so that one TMA
// store per atom and per warpgroup (box = kAtomCols x 64 rows) writes it out, and so that the 8
// rows written by one stmatrix / st.shared phase land in 8 different 16-byte bank groups (no bank
// conflicts; a whole-row atom has 2-way conflicts).
//
// Swizzle of span W (TMA CU_TENSOR_MAP_SWIZZLE_{32,64,128}B, on 1024-byte aligned smem): inside the
// atom, the byte offset o = row * W + col is stored at  o ^ (((o >> 7) & (W/16 - 1)) << 4),
// i.e. the 16-byte unit index is XOR-ed with the index of the 128-byte line, modulo W/16.
// Because col < W, (o >> 7) = row / (128 / W), so the XOR term is a per-row constant.
//
// D is stored with one TMA store per atom and warpgroup; TMA clips rows >= M and columns >= N, so
// without kMaskRows this epilogue needs row_end == rows of the D tensor (true for dense).
//
// kMaskRows (grouped layouts, whose groups end inside a tile): a warpgroup slice whose 64 rows are
// all below tile.row_end still goes out by TMA; a slice that ends past row_end (the partial last
// tile of a group: the rows past it belong to the next group, or must stay zero) is copied from the
// staged shared-memory tile to global memory with plain 16-byte stores of the rows < row_end only
// (Params carries the D pointer for that). The choice is per slice and warpgroup-uniform.
struct RowMaskEpilogueParams {
  void* d;  // D [rows, ld] row-major (the tensor tmap_d describes)
  int ld;   // elements per D row (N)
};

template <int BLOCK_M, int BLOCK_N, typename OutT, bool kMaskRows = false>
struct TmaStoreEpilogue {
  static_assert(std::is_same<OutT, __nv_bfloat16>::value || std::is_same<OutT, float>::value,
                "bf16 or f32 output");
  static constexpr bool kIsBF16 = std::is_same<OutT, __nv_bfloat16>::value;
  static constexpr int kElemBytes = static_cast<int>(sizeof(OutT));
  static constexpr int kRowBytes = BLOCK_N * kElemBytes;
  static_assert(kRowBytes % 32 == 0, "tile row must be a multiple of 32 bytes (BLOCK_N % 16 == 0 for bf16)");
  // Rows that are not a multiple of 64 bytes (bf16 112 / 144 / 176 columns) would take 32-byte
  // atoms, 7-11 TMA stores per slice; they are staged unswizzled as one whole-row atom instead (one
  // store per slice, CU_TENSOR_MAP_SWIZZLE_NONE), at the price of 2-way bank conflicts in step 2:
  // measured +0-2% at K = 2048-7168 and +1.6-7% at K = 512 (harness, H200; RESULTS.md, session 45).
  static constexpr bool kRowAtom = kRowBytes % 64 != 0;
  static constexpr int kAtomBytes = kRowAtom ? kRowBytes : (kRowBytes % 128 == 0) ? 128 : 64;
  static constexpr int kAtomCols = kAtomBytes / kElemBytes;  // columns per atom = TMA box width
  static constexpr int kNumAtoms = kRowBytes / kAtomBytes;   // TMA stores per warpgroup and tile
  static constexpr int kBoxRows = kRowsPerMathWarpgroup;     // TMA box height
  // Rows of the shared-memory staging buffer. f32 256-row tiles stage one 128-row wave at a time
  // (all 256 rows, 128 KB, would leave the pipeline one stage): slice s lives in rows of slice
  // s % kStagedSlices, and a warpgroup's second-wave store() waits in step 1 until the TMA store of
  // its first wave has read them.
  static constexpr int kStagedRows = (kElemBytes == 4 && BLOCK_M > 128) ? 128 : BLOCK_M;
  static constexpr int kStagedSlices = kStagedRows / kBoxRows;
  static constexpr int kAtomStride = kStagedRows * kAtomBytes;  // bytes from one atom to the next
  static constexpr int kSmemBytes = ((kStagedRows * kRowBytes + 1023) / 1024) * 1024;
  static constexpr int kNumAcc = BLOCK_N / 2;  // accumulator floats per thread (64 x BLOCK_N / 128)
  static constexpr bool kMasksRows = kMaskRows;

  using Params = typename std::conditional<kMaskRows, RowMaskEpilogueParams, EmptyEpilogueParams>::type;

  // bf16: columns 16p .. 16p + 15 of the accumulator (8 floats per thread) as bf16, one
  // stmatrix.x4 at this lane's address `addr` (see store(), step 2).
  __device__ __forceinline__ static void stmatrix_columns(uint32_t addr, const float (&acc)[kNumAcc], int p) {
    ptx::stmatrix_x4(addr, ptx::pack_bf16x2(acc[8 * p + 0], acc[8 * p + 1]), ptx::pack_bf16x2(acc[8 * p + 2], acc[8 * p + 3]),
                     ptx::pack_bf16x2(acc[8 * p + 4], acc[8 * p + 5]), ptx::pack_bf16x2(acc[8 * p + 6], acc[8 * p + 7]));
  }

  // XOR term (bytes) of the swizzle for a row of an atom.
  __device__ __forceinline__ static uint32_t swizzle_xor(uint32_t row) {
    if constexpr (kRowAtom) return 0;
    else return ((row / (128 / kAtomBytes)) & (kAtomBytes / 16 - 1)) << 4;
  }

  // A warpgroup's second slice of a 256-row bf16 tile (2 + wg, stored right after its first, whose
  // step 1 waited for all older stores) is staged in rows of its own, so it need not wait for the
  // first slice's TMA store to read shared memory (measured, harness: +5.5% at K = 512, +1.5% at
  // K = 2048, +1.1% at K = 7168; RESULTS.md, session 18).
  static constexpr bool kOverlapSliceStores = kStagedSlices == 4;

  // Harness-only experiments, never defined in the package (tools/tile_overhead.sh; RESULTS.md,
  // sessions 17-18): FP8GEMM_EXPERIMENT_NO_TMA_STORE, everything but the TMA store (its share of
  // the time); FP8GEMM_EXPERIMENT_LOADS_ONLY, store() returns at once: with the output unused the
  // compiler drops the promotion and the wgmmas as well (SASS: no FFMA, no QGMMA), which leaves
  // the TMA loads and the stage barriers -- the kernel's data-movement floor.

  __device__ __forceinline__ static void store(const float (&acc)[kNumAcc], uint8_t* smem_d,
                                               const CUtensorMap* tmap_d, const TileInfo& tile, int wg,
                                               int slice, int tid_in_wg, const Params& params) {
#ifdef FP8GEMM_EXPERIMENT_LOADS_ONLY
    return;
#endif
    const uint32_t warp = static_cast<uint32_t>(tid_in_wg) / 32;
    const uint32_t lane = static_cast<uint32_t>(tid_in_wg) % 32;
    const uint32_t barrier_id = 1 + static_cast<uint32_t>(wg);
    // This 64-row slice of every atom starts at atom_base + slice_offset.
    const uint32_t slice_offset = static_cast<uint32_t>(slice % kStagedSlices) * kBoxRows * kAtomBytes;
    const uint32_t slice_base = ptx::smem_u32(smem_d) + slice_offset;

    // 1. The previous tile's TMA stores must have finished reading shared memory before we
    //    overwrite it (only the issuing thread can wait on its bulk groups; the barrier publishes it).
    //    A second slice staged in rows of its own (kOverlapSliceStores) leaves the newest store
    //    pending: its first slice's, which reads other rows.
    if (tid_in_wg == 0) {
      if (kOverlapSliceStores && slice >= 2)
        ptx::bulk_wait_group_read<1>();
      else
        ptx::bulk_wait_group_read<0>();
    }
    ptx::named_barrier_sync(barrier_id, 128);

    // 2. Registers -> swizzled shared memory.
    if constexpr (kIsBF16) {
      // stmatrix.x4 stores a 16 x 16 block (two 8-column chunks x 16 rows) per instruction:
      // matrices 0/1 = chunk 2p rows 0-7 / 8-15, matrices 2/3 = chunk 2p+1 rows 0-7 / 8-15.
      // Lane t addresses row (t%8) + 8*((t/8)%2) of chunk 2p + t/16.
      const uint32_t row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      const uint32_t lane_xor = swizzle_xor(row) ^ ((lane >> 4) << 4);  // + 16 bytes for the odd chunk
      const uint32_t row_addr = slice_base + row * kAtomBytes;
#pragma unroll
      for (int p = 0; p < BLOCK_N / 16; ++p) {
        constexpr int kPairBytes = 32;  // 16 bf16 columns
        const uint32_t atom = (p * kPairBytes) / kAtomBytes;
        const uint32_t col = (p * kPairBytes) % kAtomBytes;  // multiple of 32: bit 4 is free for lane_xor
        stmatrix_columns(row_addr + atom * kAtomStride + (col ^ lane_xor), acc, p);
      }
    } else {
      // f32: each thread owns 2 consecutive floats (8 bytes) in rows r and r + 8 of every 8-column
      // chunk. A warp writes 8 rows x 32 bytes per store: with the swizzle, 2 wavefronts (minimal).
      const uint32_t row = warp * 16 + lane / 4;
      const uint32_t lane_xor = swizzle_xor(row) ^ ((lane % 4) * 8);  // row + 8 has the same XOR term
      const uint32_t row_addr = slice_base + row * kAtomBytes;
#pragma unroll
      for (int i = 0; i < BLOCK_N / 8; ++i) {
        constexpr int kChunkBytes = 32;  // 8 f32 columns
        const uint32_t atom = (i * kChunkBytes) / kAtomBytes;
        const uint32_t col = (i * kChunkBytes) % kAtomBytes;  // multiple of 32: bits 3-4 free for lane_xor
        const uint32_t addr = row_addr + atom * kAtomStride + (col ^ lane_xor);
        ptx::st_shared_v2_f32(addr, acc[4 * i + 0], acc[4 * i + 1]);
        ptx::st_shared_v2_f32(addr + 8 * kAtomBytes, acc[4 * i + 2], acc[4 * i + 3]);
      }
    }

    if constexpr (kMaskRows) {
      // Rows of this slice that are part of the tile's output (>= 1: the kernel only calls store()
      // for warpgroups with rows below row_end). Warpgroup-uniform, so the barrier below is safe.
      const int slice_row0 = tile.row_start + slice * kBoxRows;
      const int valid_rows = tile.row_end - slice_row0;
      if (valid_rows < kBoxRows) {
        ptx::named_barrier_sync(barrier_id, 128);  // the whole slice is staged
        store_rows_masked(slice_base, params, slice_row0, valid_rows, tile.col_start, tile.col_end, tid_in_wg);
        // The next store() starts with a barrier of the same 128 threads before anyone overwrites
        // the staging buffer, so these shared-memory reads are complete by then.
        return;
      }
    }

    // 3. Make the generic-proxy writes visible to the TMA (async proxy), then let one thread store.
    ptx::fence_proxy_async_shared();
    ptx::named_barrier_sync(barrier_id, 128);

    if (tid_in_wg == 0) {
      const int row = tile.row_start + slice * kBoxRows;
#pragma unroll
      for (int a = 0; a < kNumAtoms; ++a) {
        const int col = tile.col_start + a * kAtomCols;
        const void* const src = smem_d + a * kAtomStride + slice_offset;
#ifdef FP8GEMM_EXPERIMENT_NO_TMA_STORE
        continue;
#endif
        if (col >= tile.col_end) continue;  // atoms entirely right of N: nothing to write
        ptx::tma_store_2d(tmap_d, src, col, row);
      }
      ptx::bulk_commit_group();
    }
  }

  // Copies rows [0, valid_rows) of a warpgroup's staged 64-row slice to D rows slice_row0 + r, in
  // 16-byte chunks (a row is kRowBytes / 16 chunks, spread over kNumAtoms swizzled atoms); columns
  // >= col_end are skipped (N * sizeof(OutT) % 16 == 0, so a chunk is entirely inside or outside).
  // Consecutive threads take consecutive chunks of a row: 8 threads read one 128-byte swizzled line
  // (conflict-free) and a warp writes whole contiguous row segments. Where a row's chunks divide the
  // warpgroup (BLOCK_N = 128: 16 or 32), a thread keeps its chunk, so its column, and steps down
  // 128 / chunks rows per pass: the addresses are set up once and advanced. (The compiler
  // recomputes these addresses on every tile, ahead of the branch that picks this path. Computed
  // per pass with a division and a remainder, they were ~110 instructions on every tile's way from
  // the first store to the second in the grouped 256x128 kernel; RESULTS.md, session 38.)
  __device__ __forceinline__ static void store_rows_masked(uint32_t slice_base, const Params& params, int slice_row0,
                                                           int valid_rows, int col_start, int col_end,
                                                           int tid_in_wg) {
    constexpr uint32_t kChunksPerAtomRow = kAtomBytes / 16;
    constexpr uint32_t kChunksPerRow = kRowBytes / 16;
    constexpr int kElemsPerChunk = 16 / kElemBytes;
    constexpr uint32_t kChunksPerSlice = kBoxRows * kChunksPerRow;
    static_assert(kChunksPerSlice % 128 == 0, "whole passes of the warpgroup");
    uint8_t* const d = static_cast<uint8_t*>(params.d);
    const uint32_t tid = static_cast<uint32_t>(tid_in_wg);
    auto smem_addr = [&](uint32_t row, uint32_t chunk) {
      return slice_base + (chunk / kChunksPerAtomRow) * kAtomStride + row * kAtomBytes +
             (((chunk % kChunksPerAtomRow) * 16) ^ swizzle_xor(row));
    };
    auto global_ptr = [&](int row, int col) {
      return d + (static_cast<size_t>(slice_row0 + row) * static_cast<size_t>(params.ld) + static_cast<size_t>(col)) *
                     kElemBytes;
    };
    if constexpr (128 % kChunksPerRow == 0) {
      constexpr uint32_t kRowStep = 128 / kChunksPerRow;
      const uint32_t chunk = tid % kChunksPerRow;
      const int col = col_start + static_cast<int>(chunk) * kElemsPerChunk;
      if (col >= col_end) return;
      uint32_t row = tid / kChunksPerRow;
      uint8_t* out = global_ptr(static_cast<int>(row), col);
      const size_t out_step = static_cast<size_t>(kRowStep) * static_cast<size_t>(params.ld) * kElemBytes;
#pragma unroll
      for (uint32_t pass = 0; pass < kChunksPerSlice / 128; ++pass, row += kRowStep, out += out_step) {
        if (static_cast<int>(row) >= valid_rows) break;
        ptx::st_global_v4_u32(out, ptx::ld_shared_v4_u32(smem_addr(row, chunk)));
      }
    } else {
      // The thread index made opaque to the compiler, so that the per-pass addresses are computed
      // here, on this rare path: hoisted out of the tile loop, the 256x96 tile's were held across
      // its k-loop, and with posted tiles ptxas spilled them (200-436 bytes, reloaded per store;
      // the k-grouped 128x112 f32 kernel spilled 24 bytes so before).
      uint32_t opaque_tid = tid;
      asm volatile("" : "+r"(opaque_tid));
#pragma unroll
      for (uint32_t pass = 0; pass < kChunksPerSlice / 128; ++pass) {
        const uint32_t idx = pass * 128 + opaque_tid;
        const uint32_t row = idx / kChunksPerRow, chunk = idx % kChunksPerRow;
        const int col = col_start + static_cast<int>(chunk) * kElemsPerChunk;
        if (static_cast<int>(row) < valid_rows && col < col_end)
          ptx::st_global_v4_u32(global_ptr(static_cast<int>(row), col), ptx::ld_shared_v4_u32(smem_addr(row, chunk)));
      }
    }
  }

  // Called once per math thread after its last tile: outstanding TMA stores must complete before
  // the CTA (and its shared memory) goes away.
  __device__ __forceinline__ static void finish(int tid_in_wg) {
    if (tid_in_wg == 0) ptx::bulk_wait_group<0>();
  }
};

}  // namespace fp8gemm
