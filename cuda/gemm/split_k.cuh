// Split-K over a cluster, for the dense decode tiles (64 or 128 rows x 32 or 64 columns): the S CTAs
// of a cluster (2 <= S <= kMaxKSplits) compute one tile, rank r over the k-blocks DenseScheduler
// gives it, and add their FP32 partial tiles through distributed shared memory. No workspace, no
// atomics, no second kernel.
//
// Why: a decode GEMM has few tiles (64x2112x7168: 66 tiles of 64x32 for 132 SMs), and a CTA
// takes its k-blocks one ~150 ns step at a time. Two CTAs per tile, each over half of K, fill the
// SMs and halve the k-loop (8.7 -> 4.3 us there). cuBLASLt's per-tensor FP8 kernel at that shape is
// split-K too (ncu: nvjet 144x64, clusters of 2, 128 CTAs; RESULTS.md, session 29). M = 65..128
// runs one 128-row M-block (two math warpgroups) instead of two 64-row ones: B is loaded once per
// tile instead of once per M-block.
//
// Who stores what: math warp w's 16 rows (the wgmma accumulator layout, epilogue.cuh; warps 0-3 of
// the first math warpgroup, 4-7 of the second) belong to rank w S / W (W = 4 or 8 math warps; S = 3,
// W = 4: warps 0-1 to rank 0, 2 to 1, 3 to 2). Every other rank's warp w sends its fragment of those
// rows (32 lanes x kNumAcc floats, one "slot") into the owner's receive buffer with st.async, whose
// bytes complete on the owner's barrier (as a TMA load's do; the owner announces them). The owner
// adds the S partials in rank order -- the same order on every run, so the output is bitwise
// deterministic -- and writes its rows to D with plain stores (no TMA: a part of the tile's rows).
// A CTA waits for its cluster (the barrier the kernel arrives at on entry) right before the exchange.
// Each CTA takes part in one tile (the launcher's grid is S CTAs per tile), so the buffer and its
// barrier are used once: no reuse hazard, parity 0. The owner exits only after all bytes sent to it
// have landed; a sender may exit earlier (st.async takes its data from registers).
// The exchange costs the owner ~0.55 us after its k-loop at 64x2112x7168 with 64x32 tiles (2 KB per
// sender warp) and ~1.2 us with 64x128 tiles (8 KB), where the k-loop is 4-6 us (tools/timeline.sh):
// the owner's loads of the partials must all be in flight at once (the sum compiled per split
// count; as a runtime loop they went one after another, 2-3x slower). On their own two CTAs move 4
// KB this way in ~0.3 us (a microbenchmark, with or without other SMs streaming memory).
// Measured alternatives, none faster (RESULTS.md, session 29): plain remote stores with a release
// arrival per lane (the release waits for the sender's outstanding memory operations), a barrier
// per owned lane, one bulk copy per sender warp from its shared memory.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "common/sm90_ptx.cuh"
#include "gemm/fp8_gemm.h"
#include "gemm/scheduler.cuh"

namespace fp8gemm {
namespace split_k {

// One warp's fragment of a 16-row slice of a block_n-wide tile: 32 lanes x block_n / 2 floats.
__host__ __device__ constexpr int slot_bytes(int block_n) { return 32 * (block_n / 2) * 4; }
// The W math warps' rows (W = block_m / 16: 4 or 8) split over S ranks: warp w's go to rank w S / W,
// so rank r owns the warps [first_owned(r, S, W), first_owned(r + 1, S, W)): at W = 4, 2 + 2 (S = 2),
// 2 + 1 + 1 (S = 3), 1 each (S = 4); at W = 8, twice that.
__host__ __device__ constexpr int first_owned(int rank, int splits, int warps) { return (warps * rank + splits - 1) / splits; }
__host__ __device__ constexpr int max_owned(int splits, int warps) { return (warps + splits - 1) / splits; }
// Bytes of a rank's receive buffer: (S - 1) senders x the most warps a rank owns, one slot each.
__host__ __device__ constexpr int received_bytes(int block_m, int block_n, int splits) {
  return (splits - 1) * max_owned(splits, block_m / 16) * slot_bytes(block_n);
}
// Shared memory of the receive buffer, then its barrier (16 bytes, keeping the total a multiple of
// 16). 0 without split-K.
__host__ __device__ constexpr int smem_bytes(int block_m, int block_n, int splits) {
  return splits > 1 ? received_bytes(block_m, block_n, splits) + 16 : 0;
}
// The receive buffer's barrier: one arrival (the owner's expect_tx); the senders' bytes complete it.
__device__ __forceinline__ uint64_t* barrier_of(uint8_t* buf, int block_m, int block_n, int splits) {
  return reinterpret_cast<uint64_t*>(buf + received_bytes(block_m, block_n, splits));
}

// Called by every math thread (kWarps math warps: 4 per math warpgroup) with its partial `out` after
// the tile's k-loop; warp: the math warp (0 .. kWarps - 1). Returns true in the threads whose `out`
// now holds final rows (the owner's warps). buf: the receive buffer (16-byte aligned), its barrier
// initialised (barrier_of, 1 arrival). Compiled per split count, so that the owner's loads of all
// partials are in flight at once.
template <int kSplits, int kWarps, int kNumAcc>
__device__ __forceinline__ bool reduce_splits(float (&out)[kNumAcc], uint8_t* buf, uint32_t rank, uint32_t warp,
                                              uint32_t lane) {
  constexpr int kSlotBytes = 32 * kNumAcc * 4;
  constexpr uint32_t kMaxOwned = max_owned(kSplits, kWarps);
  uint64_t* const bar = barrier_of(buf, kWarps * 16, kNumAcc * 2, kSplits);
  const uint32_t owner = warp * kSplits / kWarps;
  const uint32_t buf_addr =
      ptx::smem_u32(buf) + (warp - first_owned(owner, kSplits, kWarps)) * kSlotBytes + lane * 16;
  // Slot of the partial from rank `from` in the owner's buffer (senders in rank order, owner skipped);
  // lane l's float4 j sits at (32 j + l) * 16 bytes in a slot: a warp's 16-byte accesses are contiguous.
  auto slot_addr = [&](uint32_t from) {
    return buf_addr + (from - (from > owner ? 1u : 0u)) * kMaxOwned * kSlotBytes;
  };
  if (owner != rank) {
    const uint32_t remote = ptx::map_to_cta(slot_addr(rank), owner);
    const uint32_t remote_bar = ptx::map_to_cta(ptx::smem_u32(bar), owner);
#pragma unroll
    for (int j = 0; j < kNumAcc / 4; ++j)
      ptx::st_async_v4_f32(remote + j * 32 * 16, out[4 * j], out[4 * j + 1], out[4 * j + 2], out[4 * j + 3],
                           remote_bar);
    return false;
  }
  // The owner's one arrival announces all the bytes its senders write (they may land before it).
  if (warp == first_owned(rank, kSplits, kWarps) && lane == 0) {
    const int owned = first_owned(rank + 1, kSplits, kWarps) - first_owned(rank, kSplits, kWarps);
    ptx::mbar_arrive_expect_tx(bar, static_cast<uint32_t>((kSplits - 1) * owned * kSlotBytes));
  }
#ifndef FP8GEMM_EXPERIMENT_SPLITK_LATE_WAIT  // harness-only what-if: the sum reads before the bytes are in
  ptx::mbar_wait(bar, 0);  // as for a TMA load: complete_tx makes the bytes visible to the waiters
#endif
  // partial(0) + partial(1) + ... + partial(S - 1) per element, this rank's own from registers.
  float sum[kNumAcc];
#pragma unroll
  for (uint32_t from = 0; from < kSplits; ++from) {
#pragma unroll
    for (int j = 0; j < kNumAcc / 4; ++j) {
      float v[4] = {out[4 * j], out[4 * j + 1], out[4 * j + 2], out[4 * j + 3]};
      if (from != rank) {
        const uint4 u = ptx::ld_shared_v4_u32(slot_addr(from) + j * 32 * 16);
        v[0] = __uint_as_float(u.x), v[1] = __uint_as_float(u.y), v[2] = __uint_as_float(u.z), v[3] = __uint_as_float(u.w);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) sum[4 * j + e] = from == 0 ? v[e] : sum[4 * j + e] + v[e];
    }
  }
#pragma unroll
  for (int i = 0; i < kNumAcc; ++i) out[i] = sum[i];
  return true;
}

// The split count dispatched to its compiled sum: 2 .. kMaxKSplits (fp8_gemm.h).
template <int kWarps, int kNumAcc, int kSplits = 2>
__device__ __forceinline__ bool reduce(float (&out)[kNumAcc], uint8_t* buf, int splits, uint32_t rank,
                                       uint32_t warp, uint32_t lane) {
  if constexpr (kSplits < kMaxKSplits) {
    if (splits != kSplits) return reduce<kWarps, kNumAcc, kSplits + 1>(out, buf, splits, rank, warp, lane);
  }
  return reduce_splits<kSplits, kWarps>(out, buf, rank, warp, lane);
}

// This math warp's 16 rows of the tile (warp w: rows 16 w ..) from registers to D (row-major, ld
// elements per row), rows and columns past the tile's ends skipped. A thread holds 2 consecutive
// columns per 8-column chunk: one 4-byte (bf16) or 8-byte (f32) store each (N * sizeof(OutT) % 16
// == 0 keeps them aligned).
template <class OutT, int kNumAcc>
__device__ __forceinline__ void store_rows(const float (&out)[kNumAcc], void* d, int ld, const TileInfo& t,
                                           uint32_t warp, uint32_t lane) {
  const int col0 = t.col_start + 2 * static_cast<int>(lane % 4);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = t.row_start + static_cast<int>(warp * 16 + lane / 4) + 8 * half;
    if (row >= t.row_end) continue;
    OutT* const d_row = static_cast<OutT*>(d) + static_cast<long long>(row) * ld;
#pragma unroll
    for (int i = 0; i < kNumAcc / 4; ++i) {
      const int col = col0 + 8 * i;
      if (col >= t.col_end) continue;
      const float x = out[4 * i + 2 * half], y = out[4 * i + 2 * half + 1];
      if constexpr (std::is_same<OutT, float>::value)
        *reinterpret_cast<float2*>(d_row + col) = make_float2(x, y);
      else
        *reinterpret_cast<uint32_t*>(d_row + col) = ptx::pack_bf16x2(x, y);
    }
  }
}

}  // namespace split_k
}  // namespace fp8gemm
