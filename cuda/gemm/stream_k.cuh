// Stream-K for the partial last wave of the dense 256x128 kernel.
//
// A persistent grid of G CTAs over T tiles runs ceil(T / G) waves; when T % G != 0 the last wave is
// partial and costs a whole one (4096x7168x16384: 896 tiles = 6.79 waves on 132 SMs; RESULTS.md,
// session 17). Here the whole waves run whole tiles as before (tiles [0, sk_first_tile),
// sk_first_tile = floor(T / G) * G) and each of the remaining T % G tiles is cut into S chunks of
// consecutive k-blocks (S chosen by the launch, stream_k_chunks in fp8_gemm.cu). The chunks are
// units of work in chunk-major order -- unit u = chunk u / tail_tiles of tail tile u % tail_tiles --
// handed out in the static order like tiles: 104 tail tiles x 5 chunks run as 4 sub-waves of 1/5
// of a tile instead of one whole wave.
//
// Why chunk-major and fixed chunks (measured, RESULTS.md, session 18): a first version gave each
// CTA an equal contiguous k-range of the tail laid end to end (classic stream-K). Its CTAs then
// worked at 132 different k offsets, no A or B slice was shared through the L2, and the tail ran
// from DRAM at half speed: 4096x7168x16384 1417 -> 1272 TFLOP/s. Chunk-major, the units running at
// any time read the same one or two k-ranges of neighbouring tiles, as whole tiles do.
//
// The fix-up, per tail tile and math warpgroup, through the tile's slot in the workspace: chunk 0
// stores its FP32 accumulators there and raises the tile's flag to 1; chunk j > 0 waits for the
// flag to reach j, adds the slot to its accumulators, and then either stores the sum back and
// raises the flag to j + 1 or, as the last chunk, runs the ordinary epilogue.
//   * Deterministic: the chunks and the order of the additions ((c0 + c1) + c2) + ... depend on the
//     shape and G only.
//   * No deadlock: a unit only waits for a unit of a smaller index, and each CTA runs its units in
//     increasing order, so the smallest unfinished unit always progresses -- given that all G CTAs
//     are resident at once (one per SM, the persistent grid's premise).
//
// Workspace (the FFI call's scratch result; the flags zeroed by the launch, on its stream):
//   int32 flags[G][2]                                       one per tail tile (< G) and warpgroup
//   float partials[G][2 warpgroups][2 waves][kNumAcc / 4][128 threads][4]   (128 KB per tile)
// Thread t of a warpgroup always reads and writes the same 16-byte words: the accumulator
// fragments of all chunks have the same layout, and each float4 column of 128 threads is 2 KB of
// consecutive memory (coalesced).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/sm90_ptx.cuh"

namespace fp8gemm {

namespace stream_k {

constexpr int kMathWarpgroups = 2;
constexpr int kWaves = 2;
constexpr int kThreads = 128;        // per math warpgroup
constexpr int kAccPerThread = 64;    // 64 x 128 wgmma accumulator / 128 threads
constexpr size_t kFlagBytes = 1024;  // flags region granule (keeps the partials aligned)
constexpr size_t kPartialFloatsPerTile = static_cast<size_t>(kMathWarpgroups) * kWaves * kAccPerThread * kThreads;

// Bytes of flags for up to `grid` tail tiles (2 int32 each), rounded up to whole kFlagBytes.
constexpr size_t flag_bytes(int grid) { return (static_cast<size_t>(grid) * 8 + kFlagBytes - 1) / kFlagBytes * kFlagBytes; }
// The workspace a grid of `grid` CTAs needs (Python mirror: gemm_config.stream_k_workspace_words).
constexpr size_t workspace_bytes(int grid) { return flag_bytes(grid) + static_cast<size_t>(grid) * kPartialFloatsPerTile * 4; }

#if defined(__CUDACC__)
// This warpgroup's partials in tail tile `slot` (float4 units) and its flag.
__device__ __forceinline__ float4* partials(void* workspace, int slot, int wg) {
  float* const base = reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + flag_bytes(gridDim.x));
  return reinterpret_cast<float4*>(base + (static_cast<size_t>(slot) * kMathWarpgroups + wg) * (kWaves * kAccPerThread * kThreads));
}
__device__ __forceinline__ int* flag(void* workspace, int slot, int wg) {
  return static_cast<int*>(workspace) + slot * kMathWarpgroups + wg;
}

// Chunk `chunk` > 0: waits until the chunks before it are summed in the slot, then adds the slot
// to this warpgroup's accumulators (one thread spins with acquire; the barrier extends it to all).
template <int kNumAcc>
__device__ __forceinline__ void add_earlier_chunks(void* workspace, int slot, int chunk, int wg, int tid,
                                                   uint32_t barrier_id, float (&out0)[kNumAcc], float (&out1)[kNumAcc]) {
  static_assert(kNumAcc == kAccPerThread, "the 256x128 tile");
  if (tid == 0)
    while (ptx::ld_acquire_gpu(flag(workspace, slot, wg)) < chunk) {
    }
  ptx::named_barrier_sync(barrier_id, kThreads);
  const float4* const src = partials(workspace, slot, wg);
#pragma unroll
  for (int v = 0; v < kNumAcc / 4; ++v) {
    const float4 p0 = __ldcg(src + v * kThreads + tid);  // from the L2: another SM wrote them
    const float4 p1 = __ldcg(src + (kNumAcc / 4 + v) * kThreads + tid);
    out0[4 * v] += p0.x, out0[4 * v + 1] += p0.y, out0[4 * v + 2] += p0.z, out0[4 * v + 3] += p0.w;
    out1[4 * v] += p1.x, out1[4 * v + 1] += p1.y, out1[4 * v + 2] += p1.z, out1[4 * v + 3] += p1.w;
  }
}

// A chunk before the last: stores the running sum into the slot, then raises the flag (CUTLASS's
// pattern: every thread's stores, a barrier of the warpgroup, one thread's release increment).
template <int kNumAcc>
__device__ __forceinline__ void publish(void* workspace, int slot, int wg, int tid, uint32_t barrier_id,
                                        const float (&out0)[kNumAcc], const float (&out1)[kNumAcc]) {
  float4* const dst = partials(workspace, slot, wg);
#pragma unroll
  for (int v = 0; v < kNumAcc / 4; ++v) {
    __stcg(dst + v * kThreads + tid, make_float4(out0[4 * v], out0[4 * v + 1], out0[4 * v + 2], out0[4 * v + 3]));
    __stcg(dst + (kNumAcc / 4 + v) * kThreads + tid,
           make_float4(out1[4 * v], out1[4 * v + 1], out1[4 * v + 2], out1[4 * v + 3]));
  }
  ptx::named_barrier_sync(barrier_id, kThreads);
  if (tid == 0) ptx::red_release_gpu(flag(workspace, slot, wg), 1);
}
#endif

}  // namespace stream_k

}  // namespace fp8gemm
