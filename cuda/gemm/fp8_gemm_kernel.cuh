// Block-scaled FP8 GEMM for Hopper (sm_90a), in the style of DeepGEMM's sm90_fp8_gemm_1d2d:
//
//   D[m, n] = sum_kb SFA[m, kb] * SFB[n / 128, kb] * sum_{k in block kb} A[m, k] * B[n, k]
//
// A: e4m3 [M, K] K-major, B: e4m3 [N, K] K-major, FP32 accumulation, D bf16/f32 [M, N] row-major.
// SFA: MN-major, (m, kb) at sfa[kb * sfa_ld + m] (loaded per stage by TMA).
// SFB: row-major [cdiv(N, 128), cdiv(K, 128)] (read by the math threads with __ldg).
//
// Structure (one CTA per SM, persistent):
//   warpgroup 0        TMA producer. setmaxnreg.dec to 40; one elected thread walks the tiles of
//                      the scheduler (grouped 256-row tiles: and posts them to the math warpgroups,
//                      scheduler.cuh) and, per 128-wide k-block, waits for a free stage ("empty"
//                      barrier), then loads the A tile, the SFA slice and the B tile of that stage
//                      (with a cluster of 2, the tile the pair shares -- A or B -- is loaded by
//                      rank 0 and multicast into both CTAs).
//   warpgroups 1..W    WGMMA consumers (W = BLOCK_M / 64). setmaxnreg.inc; warpgroup w owns rows
//                      64*(w-1) .. 64*(w-1)+63 of the tile. Per k-block: wait "full" barrier, 4x
//                      wgmma m64nBLOCK_Nk32 into a fresh FP32 accumulator, wait, release the stage,
//                      then promote on the CUDA cores: out += acc * (sfa[row] * sfb[col block])
//                      (two-level accumulation: the tensor core's limited-precision accumulation
//                      only spans 128 K-elements). After the last k-block the epilogue stores.
//
// Pipeline: `num_stages` (runtime) stages, each = A tile [BLOCK_M][128] + B tile [BLOCK_N][128]
// (128B-swizzled by TMA, 1024-byte aligned) + SFA [BLOCK_M] floats, with a full and an empty
// mbarrier per stage. The ring (stage index, phase bit) runs continuously across tiles; producer
// and consumers step through exactly the same sequence of (tile, k-block) pairs.
//   full[s]:  1 arrival (producer's arrive.expect_tx) + the stage's bytes delivered by TMA.
//   empty[s]: one arrival per math warp of every CTA that reads the stage (4 * W; 2 * 4 * W with
//             TMA multicast; split-K clusters share no stages): with multicast, lane 0 of each math
//             warp arrives on rank 0's barrier and lane 1 on rank
//             1's, so a stage is free in a CTA only when BOTH CTAs' consumers are done with it --
//             required because rank 0's multicast writes the shared tile into both CTAs.
//             If the peer CTA has no tile any more, both arrivals go to the own barrier.
// Split-K (dense decode tiles, GemmKernelArgs::k_splits): a cluster of k_splits CTAs per tile, each
// over its k-range; their partial tiles are added through distributed shared memory (split_k.cuh).
// Edges: TMA zero-fills out-of-bounds loads (a partial last k-block contributes zeros, rows >= M
// and columns >= N read as zero) and clips out-of-bounds stores.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "common/sm90_ptx.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/fp8_gemm.h"
#include "gemm/scheduler.cuh"
#include "gemm/split_k.cuh"
#include "gemm/timeline.cuh"

namespace fp8gemm {

constexpr int kBlockK = 128;               // K per pipeline stage = scaling block size
constexpr int kWgmmaK = 32;                // K of one e4m3 wgmma
constexpr int kNumProducerThreads = 128;   // warpgroup 0
constexpr int kProducerRegisters = 40;     // setmaxnreg for the producer warpgroup
// Named barriers: 0 = __syncthreads, 1 + wg = the epilogue of math warpgroup wg, 3 = all math
// threads (a tile's B scales are staged), 4 = the masking warps of the producer warpgroup.
constexpr uint32_t kMathBarrierId = 3;
constexpr uint32_t kMaskBarrierId = 4;
// Unroll factor of the k-loop with the scale products on the tensor cores (GemmTraits::kScaleMma):
// as the two-wave loop's with bf16 output (4 and 8 within 0.4% on its previous version, RESULTS.md, session 26).
constexpr int kScaleMmaUnroll = 8;
// Unroll factor of the serial k-loop (one-wave tiles without deferred promotion: 128 x 144..192,
// the k-grouped wgrad 64x128). Measured at 4096x2112x7168 against no unrolling: 128x192 +3%,
// 128x160 +4%, 128x144 +7% (8: 128x192 and 128x160 +0.5% more, 128x144 8% less; RESULTS.md,
// session 15). Except where a tile's loop has more than four copies (GemmTraits::kSplitCopies:
// 128x144 and 128x176, eight each): every tile fetches its copy's instructions from L2 when it
// starts, and four k-blocks of straight-line code are 16 KB. Unrolled twice, 128x176 gained 18% at
// K = 512, 8% at K = 2048 and 0.6-2.3% at K = 7168, 128x144 14% / 1.2% at K = 512 / 7168; 128x160
// (four copies) lost 1% and 128x192 (two) 1% (H200, RESULTS.md, session 46).
template <int kSplitCopies>
constexpr int kSerialUnroll = kSplitCopies > 4 ? 2 : 4;
// Unroll factor of the two-wave (256-row tile) k-loop with bf16 output (dense, grouped, wgrad).
// Measured against 2 (medians of 3 alternated runs): dense 4096x7168x16384 1477 -> 1507, 8192^3
// +2%, grouped +0.2-8%, wgrad +2-5% (RESULTS.md, session 15). With f32 output the unrolled loop
// spills (the f32 epilogue keeps more registers live): 2 there.
template <int kOutBytes>
constexpr int kTwoWaveUnroll = kOutBytes == 2 ? 8 : 2;

namespace detail {
constexpr int const_gcd(int a, int b) { return b == 0 ? a : const_gcd(b, a % b); }
}  // namespace detail

// kPerRowScaleB (weight-gradient GEMMs): B has one scale per row and 128-wide k-block, exactly like
// A (SFB MN-major [cdiv(K,128)][sfb_ld], loaded per stage by TMA as BLOCK_N floats), and the
// promotion multiplies each accumulator by sfa[row] * sfb[col]. Off: 128x128 B-scale blocks read
// with __ldg (the forward / dgrad GEMMs).
// kMaskSharedBlocks (k-grouped weight gradients): a third mbarrier per stage, for the k-blocks
// that two groups share (see the producer warpgroup's masking warps in the kernel).
template <int BLOCK_M, int BLOCK_N, class Epilogue, bool kPerRowScaleB = false, bool kMaskSharedBlocks = false>
struct GemmTraits {
  static_assert(BLOCK_M == 64 || BLOCK_M == 128 || BLOCK_M == 256,
                "BLOCK_M: one or two math warpgroups of 64 rows, or two of two 64-row waves");
  static_assert(BLOCK_N % 16 == 0 && BLOCK_N >= 16 && BLOCK_N <= 256, "BLOCK_N: multiple of 16 in [16, 256]");
  static constexpr int kNumMathWarpgroups = BLOCK_M == 64 ? 1 : 2;
  // BLOCK_M 256: each math warpgroup computes two 64-row slices ("waves") per k-block, rows
  // 64 * wg and 128 + 64 * wg, reusing one wgmma accumulator (serial promotion) into two output
  // arrays. Twice the FLOPs per byte of B loaded: the L2 -> SM traffic per FLOP drops by a quarter
  // against 128-row tiles (DeepGEMM's choice for large bf16-output GEMMs).
  static constexpr int kNumWaves = BLOCK_M / (64 * kNumMathWarpgroups);
  static constexpr int kNumMathThreads = 128 * kNumMathWarpgroups;
  static constexpr int kNumThreads = kNumProducerThreads + kNumMathThreads;
  // Register budget: 64K registers per SM for the single CTA. 3 warpgroups: 128 * 40 + 256 * 232 =
  // 64512; 2 warpgroups: 128 * 40 + 128 * 240. The math path needs BLOCK_N (out + acc) + ~30.
  static constexpr int kMathRegisters = kNumMathWarpgroups == 2 ? 232 : 240;
  static_assert(kProducerRegisters * 128 + kMathRegisters * kNumMathThreads <= 65536, "register file");

  static constexpr int kNumAcc = BLOCK_N / 2;  // FP32 accumulators per thread for 64 x BLOCK_N
  // Deferred promotion keeps two accumulator arrays and the output: 3 * kNumAcc registers plus
  // ~40 for addresses, scales and loop state must fit the math warpgroups' budget.
  // Per-column B scales with the row-masking epilogue (k-grouped wgrad) need a few registers more.
  // At 128x128 ptxas then spills 28 bytes, stored once per tile before the k-loop and reloaded
  // after it (measured: faster than the serial loop); at 64x128 68 bytes: that one stays serial.
  static constexpr int kExtraRegisters = (kPerRowScaleB && Epilogue::kMasksRows && BLOCK_M == 64) ? 16 : 0;
  static constexpr bool kDeferredPromotion =
      kNumWaves == 1 && 3 * kNumAcc + 40 + kExtraRegisters <= (BLOCK_M == 128 ? 232 : 240);
  static_assert(kNumWaves == 1 || (kNumWaves + 1) * kNumAcc + 40 <= kMathRegisters,
                "two-wave tiles: two output arrays and one accumulator must fit the registers");
  // B-scale blocks: with BLOCK_N not dividing 128 (e.g. 112, 144, 160) some tiles have columns in
  // two consecutive 128-wide scale blocks. A tile starts at an offset (col_start % 128) that is a
  // multiple of g = gcd(BLOCK_N, 128), at most 128 - g, so it touches at most
  // cdiv(128 - g + BLOCK_N, 128) scale blocks: two up to 128 + g columns, three beyond (176:
  // columns 352..527 touch blocks 2, 3 and 4). The promotion handles up to three.
  static constexpr int kScaleGcd = detail::const_gcd(BLOCK_N, 128);
  static constexpr int kMaxScaleBlocks = (128 - kScaleGcd + BLOCK_N + 127) / 128;
  static_assert(kMaxScaleBlocks <= 3, "a tile may touch at most three B-scale blocks");
  static constexpr bool kMayStraddle = (128 % BLOCK_N) != 0;
  // A tile's split (8-column chunks of its first B-scale block) is a multiple of g / 8 up to this;
  // a k-loop is compiled once per possible split (detail::dispatch_split; per-column B scales need
  // no split).
  static constexpr int kSplitMax = (BLOCK_N < 128 ? BLOCK_N : 128) / 8;
  static constexpr int kSplitCopies = kMayStraddle && !kPerRowScaleB ? kSplitMax / (kScaleGcd / 8) : 1;

  static constexpr int kSmemA = BLOCK_M * kBlockK;  // bytes per stage (1 byte per e4m3)
  static constexpr int kSmemB = BLOCK_N * kBlockK;
  static constexpr int kSmemAB = kSmemA + kSmemB;
  // SFA is loaded as BLOCK_M + 4 floats starting at row_start rounded down to a multiple of 4: a
  // TMA box must start 16-byte aligned along its inner (here: M) dimension (a misaligned start is an
  // illegal instruction, RESULTS.md session 28), and grouped tiles
  // start at any row. The consumers skip the (row_start % 4) leading floats. A box holds at most
  // 256 floats, so grouped 256-row tiles (the row-masking epilogue) load A and its scales per wave
  // (kLoadPerWave): box w holds rows 128 * w + [0, 128) of A (wave w of both math warpgroups) and
  // 128 + 4 of its scales, kSfaWaveStride floats apart in shared memory (a TMA destination must be
  // 128-byte aligned). A tile that runs one wave (the partial last tile of a group: one_wave_tile)
  // loads the first box of each only. Dense 256-row tiles start at multiples of 256 and load one
  // box of 256 rows and one of 256 scales.
  static constexpr bool kLoadPerWave = BLOCK_M == 256 && Epilogue::kMasksRows;
  static constexpr int kWaveLoads = kLoadPerWave ? 2 : 1;   // boxes of A (and of SFA) per stage
  static constexpr int kALoadRows = BLOCK_M / kWaveLoads;  // rows of A per box
  static constexpr int kSfaBoxRows = BLOCK_M == 256 ? (kLoadPerWave ? 132 : 256) : BLOCK_M + 4;
  static constexpr int kSfaWaveStride = ((kSfaBoxRows * 4 + 127) / 128) * 32;  // one box, 128-byte aligned
  // Floats from the first wave's scales to the second's: the next box, or 128 rows into the one box.
  static constexpr int kSfaWaveOffset = kLoadPerWave ? kSfaWaveStride : 128;
  static constexpr int kSmemSFA = kWaveLoads * kSfaWaveStride * 4;
  // SFB slice (kPerRowScaleB only): BLOCK_N floats from col_start, which is a multiple of BLOCK_N
  // (so of 16): 16-byte aligned without the SFA-style pad. Each stage has two slots, used on
  // alternate passes over the ring (slot = the ring phase): the math warps release a stage as
  // soon as its wgmmas are done and still read its per-column scales while promoting, because the
  // next TMA into the stage fills the other slot.
  static constexpr int kSfbBoxCols = kPerRowScaleB ? BLOCK_N : 0;
  // Scale products on the tensor cores (the dense wgrad's 256x96 tile). Per wave, one bf16 wgmma
  // m64n96k16 computes P[r][c] = sa[r] * sb[c] in the accumulator layout from sa = hi + lo and
  // sb = hi + lo (two bf16s each): A from registers, rows (hi, lo, hi, lo), B rows (hi, hi, lo, lo),
  // zeros to k = 16, so each row pair sums to (hi_a + lo_a) * (hi_b + lo_b) (relative error
  // ~2^-17). The promotion is then one FFMA per element, out += acc * P, as in the forward kernel,
  // instead of an FMUL and an FFMA: the per-column promotion costs the 256x128 tile a quarter of
  // its time (RESULTS.md, session 24). A's operand comes ready-made in place of A's scales
  // (WgradGemmProblem::sfa_ops: the bf16 pair (hi, lo) of each row's scale as one 32-bit word, in
  // the layout of the scales), each thread's lanes' words going straight into the wgmma's A
  // registers. B's operand comes ready-made (WgradGemmProblem::sfb_ops,
  // 16 bytes per column and k-block: (hi, hi, lo, lo, 0 x 4)) and is loaded by TMA into the
  // stage's SFB slot in place of B's scales: 8-row core matrices of 16 bytes stacked along N
  // (SBO 128 B). Its k 8-15 half is never written: the descriptor's LBO of 16 B points it at the
  // next row (finite bytes; the last row's at a 16-byte zero pad), and A's k 8-15 registers are 0.
  // Written in the kernel instead, the operand cost ~10% (RESULTS.md, session 26). The k-grouped
  // twin takes the same operand: a 128-token block two groups share keeps its scales, only the
  // other group's tokens of B are zeroed (the producer's masking warps).
  // 96 columns: three accumulator arrays (acc, P, two outputs of 48) fit the registers; at 128 they do not.
  static constexpr bool kScaleMma = kPerRowScaleB && BLOCK_M == 256 && BLOCK_N == 96;
  static constexpr int kScaleOpColBytes = 16;  // per column of B's scale operand and k-block
  static constexpr int kSfbBoxBytes = kScaleMma ? BLOCK_N * kScaleOpColBytes : kSfbBoxCols * 4;
  static constexpr int kSfbSlotFloats = ((kSfbBoxBytes + (kScaleMma ? 16 : 0) + 127) / 128) * 32;
  static constexpr int kSmemSFB = 2 * kSfbSlotFloats * 4;
  static constexpr int kSmemD = Epilogue::kSmemBytes;
  static constexpr int kSmemBarriers = (kMaskSharedBlocks ? 3 : 2) * 8;  // full + empty (+ loaded) mbarrier per stage
  static constexpr int kSmemPerStage = kSmemAB + kSmemSFA + kSmemSFB + kSmemBarriers;
  static constexpr uint32_t kTxBytesPerStage = kSmemA + kSmemB + kWaveLoads * kSfaBoxRows * 4 + kSfbBoxBytes;
  static constexpr uint32_t kWaveLoadBytes = kALoadRows * kBlockK + kSfaBoxRows * 4;  // one box of A and of SFA
  static_assert(kSmemA % 1024 == 0 && kSmemB % 1024 == 0 && kSmemD % 1024 == 0,
                "128B-swizzled tiles must stay 1024-byte aligned");

  // Rows of B scales staged per tile in shared memory (two buffers after the barriers; each row
  // cdiv(K,128) floats rounded up to 4): two-wave tiles and tiles that may straddle two 128-wide
  // scale blocks (2 rows) stage them; one-wave tiles of BLOCK_N dividing 128 read them from global
  // memory one k-block ahead instead (measured: 128x128 +7% at K=16384 with the global loads,
  // 128x112 +10% staged; RESULTS.md); 0 with per-row B scales. Grouped 256-row tiles (kLoadPerWave)
  // stage 2 rows: a wide tile (TileInfo::wide) covers two N-blocks.
  static constexpr int kSfbStagedRows =
      kPerRowScaleB ? 0
                    : (kMaxScaleBlocks > 2 ? 3 : (kMayStraddle || kLoadPerWave) ? 2 : (kNumWaves > 1 ? 1 : 0));
  // A third scale block is read by the serial loop only (the tiles that need it are too wide for
  // deferred promotion or two waves).
  static_assert(kMaxScaleBlocks <= 2 || (!kDeferredPromotion && kNumWaves == 1 && kSfbStagedRows == 3),
                "three B-scale blocks: serial loop with staged scales");
  // A wide tile's second B tile goes into the half of the stage's A tile that its one wave leaves free.
  static_assert(!kLoadPerWave || kSmemB <= kALoadRows * kBlockK, "wide tiles: a B tile fits half an A tile");

  static constexpr int kSmemFixed = kSmemD;  // besides the stages
  static constexpr int smem_bytes(int num_stages) { return kSmemFixed + num_stages * kSmemPerStage; }
};

// A switch that is on unless the environment variable `name` starts with '0' (read once; for A/B
// measurements of one build).
inline int env_switch(const char* name) {
  const char* env = std::getenv(name);
  return (env != nullptr && env[0] == '0') ? 0 : 1;
}
// Deferred promotion (FP8GEMM_DEFERRED), the two-wave loop's skipping of empty waves
// (FP8GEMM_SKIP_WAVES) and the run-time tile order of the grouped kernels (FP8GEMM_RUN_TIME_ORDER).
inline int deferred_promotion_default() {
  static const int value = env_switch("FP8GEMM_DEFERRED");
  return value;
}
inline int skip_empty_waves_default() {
  static const int value = env_switch("FP8GEMM_SKIP_WAVES");
  return value;
}
// Wide tiles for the grouped 256-row tile's partial M-blocks (FP8GEMM_WIDE_PARTIAL; scheduler.cuh).
inline bool wide_partial_default() {
  static const bool value = env_switch("FP8GEMM_WIDE_PARTIAL") != 0;
  return value;
}
// The dense scheduler's halved tail (FP8GEMM_TAIL_HALVES; DenseSchedulerParams::tail_tiles).
inline bool tail_halves_default() {
  static const bool value = env_switch("FP8GEMM_TAIL_HALVES") != 0;
  return value;
}
inline bool run_time_order_default() {
  static const bool value = env_switch("FP8GEMM_RUN_TIME_ORDER") != 0;
  return value;
}

// Plain kernel arguments (the tensor maps travel separately as __grid_constant__ parameters).
struct GemmKernelArgs {
  const float* sfb;  // B scales, row-major [cdiv(N,128), num_k_blocks] (per group, at sfb_offset)
  int n;             // N (to clamp the second B-scale block at the right edge)
  int num_k_blocks;  // cdiv(K, 128)
  int num_stages;    // pipeline depth (fits the dynamic shared memory the launch provides)
  // 1: issue k-block kb+1 before promoting kb (tiles where it fits; see kDeferredPromotion).
  int deferred_promotion = deferred_promotion_default();
  // 1: a 256-row tile with at most 128 valid rows (a partial last tile) runs the first 64-row wave
  // of each math warpgroup only.
  int skip_empty_waves = skip_empty_waves_default();
  // Floats per B-scale staging buffer: GemmTraits::kSfbStagedRows rows of round_up(num_k_blocks, 4);
  // the launch reserves 2 buffers per math warpgroup after the barriers. 0 with per-row B scales.
  int sfb_staged_floats = 0;
  // Rows of A per TMA load (0: BLOCK_M). Fewer, a multiple of 8, when M is below the tile (decode):
  // the other rows of every stage's A tile are never loaded (see the kernel's prologue), because
  // boxes mostly outside the tensor cost TMA time (1x2112x7168 ran 20.7 us, 64x2112x7168 15.1;
  // trimmed: 16.5).
  int a_box_rows = 0;
  // Floats of A's scales per TMA load (0: GemmTraits::kSfaBoxRows). Dense GEMMs load a_box_rows
  // (4 more in a flat view, sfa_flat_ld): their tiles start at multiples of BLOCK_M (no
  // misalignment pad needed), and a box mostly
  // outside the tensor is slow (decode at M = 1: the 68-float box made a 64x32 k-block 153 ns
  // instead of 143; RESULTS.md, session 22).
  int sfa_box_rows = 0;
  // A's scales viewed flat (dense GEMMs whose scales are not padded to a multiple of 4 rows, e.g.
  // M = 1 at decode: no pad kernel runs before the GEMM): 0 for the 2D [kb][sfa_ld] view; else
  // sfa_ld, and (row, kb) is element kb * sfa_flat_ld + row of a one-row tensor (64-row tiles
  // only: the launcher pads nothing, jax_fp8gemm/gemm.py pads for the others). A box must start
  // 16-byte aligned (a misaligned start is an illegal instruction), so k-block kb's box starts at
  // that element rounded down to a multiple of 4 and the math warps read (kb * sfa_flat_ld) % 4
  // floats further (sfa_box_rows covers the shift); rows past M come from the next k-block's scales
  // (or zeros past the end) and only feed output rows that are never stored.
  int sfa_flat_ld = 0;
  // Split-K over a cluster (dense 64-row tiles; split_k.cuh): CTAs per tile (1: none). The ranks'
  // owned rows are stored to d (row-major, ld_d elements per row) with plain stores.
  int k_splits = 1;
  void* d = nullptr;
  int ld_d = 0;
#ifdef FP8GEMM_EXPERIMENT_TIMELINE
  unsigned long long* timeline = nullptr;  // gemm/timeline.cuh (harness-only)
#endif
};

namespace detail {

// Whether a tile of a two-wave (256-row) kernel has rows in the first wave of each math warpgroup
// only: at most 128 valid rows (the partial last tile of a group, or of M). It then runs the
// one-wave loop and loads one box of A and SFA per stage (kLoadPerWave kernels); the producer and
// the math warpgroups decide alike.
template <int kNumWaves>
__device__ __forceinline__ bool one_wave_tile(const TileInfo& t, const GemmKernelArgs& args) {
  return kNumWaves > 1 && args.skip_empty_waves != 0 && t.row_end - t.row_start <= 128;
}

// Whether a tile is a wide tile of at most 64 rows (grouped 256-row kernels), whose two N-blocks the
// two math warpgroups split, each running one wave on rows 0..63 (the kernel's narrow-wide loop).
// Recomputed where needed rather than kept in a register across the k-loop.
template <class Traits, bool kPerRowScaleB>
__device__ __forceinline__ bool narrow_wide_tile(const TileInfo& t) {
  return Traits::kLoadPerWave && !kPerRowScaleB && t.wide && t.row_end - t.row_start <= 64;
}

// o + a * s, or a * s for a tile's first k-block (kFirst: its outputs need no zeroing beforehand).
template <bool kFirst>
__device__ __forceinline__ float scale_add(float a, float s, float o) {
  if constexpr (kFirst)
    return a * s;
  else
    return fmaf(a, s, o);
}

// out += acc * scale, where chunks (8 columns) [0, kSplit) use the first B-scale block, the next
// 16 chunks (128 columns) the second and any after them the third (tiles wider than 128 + gcd).
// s_r_b = sfa(row r) * sfb(block b), r = thread's row 0 / row 8.
// kFirst: the tile's first k-block, out = acc * scale (scale_add).
template <int kSplit, bool kFirst = false, int kNumAcc>
__device__ __forceinline__ void promote(float (&out)[kNumAcc], const float (&acc)[kNumAcc], float s0_b0,
                                        float s1_b0, float s0_b1, float s1_b1, float s0_b2 = 0.f,
                                        float s1_b2 = 0.f) {
#pragma unroll
  for (int i = 0; i < kNumAcc / 4; ++i) {
    // Resolved at compile time.
    const float s0 = i < kSplit ? s0_b0 : i < kSplit + 16 ? s0_b1 : s0_b2;
    const float s1 = i < kSplit ? s1_b0 : i < kSplit + 16 ? s1_b1 : s1_b2;
    out[4 * i + 0] = scale_add<kFirst>(acc[4 * i + 0], s0, out[4 * i + 0]);
    out[4 * i + 1] = scale_add<kFirst>(acc[4 * i + 1], s0, out[4 * i + 1]);
    out[4 * i + 2] = scale_add<kFirst>(acc[4 * i + 2], s1, out[4 * i + 2]);
    out[4 * i + 3] = scale_add<kFirst>(acc[4 * i + 3], s1, out[4 * i + 3]);
  }
}

// Calls f(std::integral_constant<int, n>{}) if n is one of kFirst, kFirst + kStep, ... (at most
// kLast), and says whether it did: a tile-uniform runtime value becomes a compile-time one.
template <int kFirst, int kStep, int kLast, class F>
__device__ __forceinline__ bool dispatch_value(int n, F&& f) {
  if constexpr (kFirst > kLast) {
    return false;
  } else {
    if (n == kFirst) {
      f(std::integral_constant<int, kFirst>{});
      return true;
    }
    return dispatch_value<kFirst + kStep, kStep, kLast>(n, f);
  }
}

// Turns the tile-uniform runtime split (in 8-column chunks: chunks [0, split) use the first B-scale
// block) into a compile-time one: calls f(std::integral_constant<int, split>{}), so that a whole
// k-loop is compiled once per split and its promotion needs no per-element selects or branches
// (DeepGEMM does the same). Candidates are multiples of kStep up to kMax: the split of a tile is
// min(BLOCK_N, 128 - col_start % 128) / 8 and col_start % 128 is a multiple of
// gcd(BLOCK_N, 128), so kStep = gcd / 8 covers every case; kMax (= min(BLOCK_N, 128) / 8) is the
// catch-all.
template <int kCur, int kStep, int kMax, class F>
__device__ __forceinline__ void dispatch_split(int split, F&& f) {
  if (!dispatch_value<kCur, kStep, kMax - 1>(split, f)) f(std::integral_constant<int, kMax>{});
}

// Per-column B scales (kPerRowScaleB): out += acc * (sfa[row] * sfb[col]). This thread's columns
// are 8*i + 2*(lane%4) + {0, 1}; their scales are read from the stage's SFB slice in shared memory
// as one 8-byte load per 8-column chunk (the 4 distinct addresses of a warp are 32 consecutive
// bytes: one wavefront, broadcast to the 8 lanes of equal lane%4). Reading them here, right where
// they are used, keeps them out of the register budget of the deferred loop (the stage is released
// after the promotion instead of before it).
// kFirst as in promote().
template <bool kFirst, int kNumAcc>
__device__ __forceinline__ void promote_per_column(std::bool_constant<kFirst>, float (&out)[kNumAcc],
                                                   const float (&acc)[kNumAcc], float sfa0, float sfa1,
                                                   uint32_t sfb_thread_addr) {
#pragma unroll
  for (int i = 0; i < kNumAcc / 4; ++i) {
    const float2 sb = ptx::ld_shared_v2_f32(sfb_thread_addr + i * 8 * 4);
    out[4 * i + 0] = scale_add<kFirst>(acc[4 * i + 0], sfa0 * sb.x, out[4 * i + 0]);
    out[4 * i + 1] = scale_add<kFirst>(acc[4 * i + 1], sfa0 * sb.y, out[4 * i + 1]);
    out[4 * i + 2] = scale_add<kFirst>(acc[4 * i + 2], sfa1 * sb.x, out[4 * i + 2]);
    out[4 * i + 3] = scale_add<kFirst>(acc[4 * i + 3], sfa1 * sb.y, out[4 * i + 3]);
  }
}

// Whether a scheduler gives every tile its own k-block range (TileInfo::kb_begin / kb_end): the
// k-grouped weight-gradient scheduler does; for the others every tile runs k-blocks
// [0, num_k_blocks) and the range is a compile-time-free constant.
template <class Scheduler, class = void>
struct HasTileKRange : std::false_type {};
template <class Scheduler>
struct HasTileKRange<Scheduler, std::void_t<decltype(Scheduler::kTileKRange)>>
    : std::integral_constant<bool, Scheduler::kTileKRange> {};
// The most k-blocks a tile of the scheduler has, when known at compile time (short-K dense
// kernels: DenseScheduler's kMaxKBlocks), else 0.
template <class Scheduler, class = void>
struct MaxTileKBlocks : std::integral_constant<int, 0> {};
template <class Scheduler>
struct MaxTileKBlocks<Scheduler, std::void_t<decltype(Scheduler::kMaxKBlocks)>>
    : std::integral_constant<int, Scheduler::kMaxKBlocks> {};
// Whether the scheduler's tiles have k-blocks that two groups share (k-grouped wgrad): a third
// barrier per stage and the producer warpgroup's masking warps.
template <class Scheduler, class = void>
struct MasksSharedBlocks : std::false_type {};
template <class Scheduler>
struct MasksSharedBlocks<Scheduler, std::void_t<decltype(Scheduler::kMasksSharedBlocks)>>
    : std::integral_constant<bool, Scheduler::kMasksSharedBlocks> {};
// Whether the scheduler leaves rows of D to zero (grouped layouts): the producer warpgroup's idle
// warps call Scheduler::zero_unwritten_rows.
template <class Scheduler, class = void>
struct ZeroesUnwrittenRows : std::false_type {};
template <class Scheduler>
struct ZeroesUnwrittenRows<Scheduler, std::void_t<decltype(Scheduler::kZeroesUnwrittenRows)>>
    : std::integral_constant<bool, Scheduler::kZeroesUnwrittenRows> {};

// Whether only the producer runs the scheduler and posts the tiles into a TileRing for the math
// threads (scheduler.cuh: kPostsTiles): the grouped 256-row tile, whose tiles may also be handed out
// at run time through Params::tile_counter, the dense one for K = 513-4096 (the second to fourth
// short-K twins, FP8GEMM_POSTED_LOOP_TILES) and every k-grouped wgrad tile.
template <class Scheduler, class = void>
struct PostsTiles : std::false_type {};
template <class Scheduler>
struct PostsTiles<Scheduler, std::void_t<decltype(Scheduler::kPostsTiles)>>
    : std::integral_constant<bool, Scheduler::kPostsTiles> {};

// The math threads' tiles: from a scheduler of their own in the static order, or, posted tiles,
// the first decoded by a scheduler that lives for that call only (index blockIdx.x in either
// order: no hand-off on the way to the first k-block) and the others read from the producer's ring.
template <class Scheduler, bool kPosted = PostsTiles<Scheduler>::value>
class MathTiles {
 public:
  __device__ __forceinline__ MathTiles(const typename Scheduler::Params& params, uint32_t cluster_size, TileRing*)
      : scheduler_(params, cluster_size) {}
  __device__ __forceinline__ bool first(TileInfo& tile) { return next(tile); }
  __device__ __forceinline__ bool next(TileInfo& tile) { return scheduler_.next(tile, feed_); }

 private:
  Scheduler scheduler_;
  StaticTiles feed_;
};
template <class Scheduler>
class MathTiles<Scheduler, true> {
 public:
  __device__ __forceinline__ MathTiles(const typename Scheduler::Params& params, uint32_t cluster_size, TileRing* ring)
      : params_(params), cluster_size_(cluster_size), reader_(ring, params.n) {}
  __device__ __forceinline__ bool first(TileInfo& tile) {
    Scheduler scheduler(params_, cluster_size_);
    StaticTiles feed;
    return scheduler.next(tile, feed);
  }
  __device__ __forceinline__ bool next(TileInfo& tile) { return reader_.next(tile); }

 private:
  const typename Scheduler::Params& params_;  // the kernel parameter
  uint32_t cluster_size_;
  TileReader<Scheduler::kSlotReleasePerThread, HasTileKRange<Scheduler>::value> reader_;
};

// k-grouped: whether k-block kb of the tile may hold tokens of another group (the tile's tokens
// start or end inside it; masking a block cut by the end of T instead, which TMA fills with zeros
// past T, is harmless).
__device__ __forceinline__ bool shares_block(const TileInfo& t, int kb) {
  return (kb == t.kb_begin && t.tok_begin % kBlockK != 0) || (kb == t.kb_end - 1 && t.tok_end % kBlockK != 0);
}

}  // namespace detail

template <int BLOCK_M, int BLOCK_N, class Epilogue, class Scheduler, bool kPerRowScaleB = false>
__global__ void __launch_bounds__(GemmTraits<BLOCK_M, BLOCK_N, Epilogue, kPerRowScaleB>::kNumThreads, 1)
    sm90_fp8_gemm_kernel(const __grid_constant__ CUtensorMap tmap_a,    // e4m3 [M, K], box 128 x BLOCK_M, SW128
                         const __grid_constant__ CUtensorMap tmap_b,    // e4m3 [N, K], box 128 x BLOCK_N, SW128
                         const __grid_constant__ CUtensorMap tmap_sfa,  // f32 [kb][M] (pitch sfa_ld), box BLOCK_M x 1
                         const __grid_constant__ CUtensorMap tmap_d,    // epilogue output
                         const GemmKernelArgs args, const typename Scheduler::Params sched_params,
                         const typename Epilogue::Params epi_params,
                         // f32 [kb][N] (pitch sfb_ld), box BLOCK_N x 1; kPerRowScaleB only (unused otherwise)
                         const __grid_constant__ CUtensorMap tmap_sfb) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool kTileKRange = detail::HasTileKRange<Scheduler>::value;
  constexpr int kMaxTileKBlocks = detail::MaxTileKBlocks<Scheduler>::value;
  constexpr bool kMaskShared = detail::MasksSharedBlocks<Scheduler>::value;
  using Traits = GemmTraits<BLOCK_M, BLOCK_N, Epilogue, kPerRowScaleB, kMaskShared>;
  // Split-K over a cluster (args.k_splits > 1): the dense decode tiles, 64 or 128 x 32 or 64
  // (split_k.cuh).
  constexpr bool kMaySplitK =
      is_split_k_tile(BLOCK_M, BLOCK_N) && kTileKRange && !kPerRowScaleB && !Epilogue::kMasksRows;
  using Wgmma = ptx::WgmmaFp8<BLOCK_N>;
  constexpr int kNumAcc = Traits::kNumAcc;
  static_assert(Wgmma::kNumAcc == kNumAcc, "wgmma shape");

  // ---------------------------------------------------------------------------------------------
  // Shared memory: [ D (epilogue) | stage 0 A, B | stage 1 A, B | ... | SFA (SFB) x stages |
  //                  barriers | B-scale staging buffers | tile ring (posted tiles) ]
  // ---------------------------------------------------------------------------------------------
  extern __shared__ __align__(1024) uint8_t smem[];
  const int num_stages = args.num_stages;
  const int num_k_blocks = args.num_k_blocks;
  uint8_t* const smem_d = smem;
  uint8_t* const smem_ab = smem + Traits::kSmemD;
  float* const smem_sfa = reinterpret_cast<float*>(smem_ab + num_stages * Traits::kSmemAB);
  float* const smem_sfb = smem_sfa + num_stages * (Traits::kSmemSFA / 4);  // kPerRowScaleB only
  uint64_t* const full_bar = reinterpret_cast<uint64_t*>(
      smem_ab + num_stages * (Traits::kSmemAB + Traits::kSmemSFA + Traits::kSmemSFB));
  uint64_t* const empty_bar = full_bar + num_stages;
  // k-grouped: the TMA loads of a k-block two groups share complete on loaded_bar; the masking
  // warps then complete full_bar.
  uint64_t* const loaded_bar = empty_bar + num_stages;
  // Two buffers of args.sfb_staged_floats B scales per math warpgroup (one tile's each; not with
  // per-row B scales).
  float* const smem_sfb_tiles = reinterpret_cast<float*>(empty_bar + (kMaskShared ? 2 : 1) * num_stages);
  // Posted tiles (256-row tiles, PostsTiles): the producer posts them into a ring after the staging
  // buffers, in the run-time order when the launch gives a tile counter, else in the static order.
  constexpr bool kPostsTiles = detail::PostsTiles<Scheduler>::value;
  TileRing* tile_ring = nullptr;
  int* tile_counter = nullptr;
  if constexpr (kPostsTiles) {
    tile_counter = Scheduler::tile_counter(sched_params);
    tile_ring = reinterpret_cast<TileRing*>(smem_sfb_tiles + 4 * args.sfb_staged_floats);
  }

  // Warp index made warp-uniform explicitly (lets the compiler keep it in a uniform register).
  const uint32_t warp_idx = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);
  const uint32_t lane = ptx::lane_id();
  const uint32_t cluster_size = ptx::cluster_num_ctas();  // 1, 2 with TMA multicast, k_splits with split-K
  const uint32_t cta_rank = ptx::cluster_cta_rank();
  // The CTAs whose consumers release each stage: the multicast pair, or this CTA alone (split-K
  // clusters share no stages).
  const bool split_k = kMaySplitK && args.k_splits > 1;
  const uint32_t stage_sharers = split_k ? 1u : cluster_size;
  // Split-K's receive buffer and its barriers, after the (here unused) B-scale staging buffers.
  uint8_t* const split_buf = reinterpret_cast<uint8_t*>(smem_sfb_tiles + 4 * args.sfb_staged_floats);
  FP8GEMM_TIMELINE_HEADER(threadIdx.x == 0, 0, 2);

  if (warp_idx == 0 && ptx::elect_one()) {
    ptx::prefetch_tensor_map(&tmap_a);
    ptx::prefetch_tensor_map(&tmap_b);
    ptx::prefetch_tensor_map(&tmap_sfa);
    ptx::prefetch_tensor_map(&tmap_d);
    if constexpr (kPerRowScaleB) ptx::prefetch_tensor_map(&tmap_sfb);
  }
  if (warp_idx == 1 && ptx::elect_one()) {
    // The swizzle patterns (TMA and WGMMA descriptors with base offset 0) assume 1024-byte
    // aligned tiles; dynamic shared memory starts at the (aligned) window base when the kernel has
    // no static shared memory. Fail loudly rather than compute garbage if that ever changes.
    if (ptx::smem_u32(smem) % 1024 != 0) __trap();
    for (int s = 0; s < num_stages; ++s) {
      ptx::mbar_init(&full_bar[s], 1);
      ptx::mbar_init(&empty_bar[s], stage_sharers * Traits::kNumMathThreads / 32);
      if constexpr (kMaskShared) ptx::mbar_init(&loaded_bar[s], 1);
    }
    if (split_k) ptx::mbar_init(split_k::barrier_of(split_buf, BLOCK_M, BLOCK_N, args.k_splits), 1);
    if constexpr (kPostsTiles)
      tile_ring->init(Scheduler::kSlotReleasePerThread ? Traits::kNumMathThreads : Traits::kNumMathThreads / 32);
    if constexpr (Traits::kScaleMma) {
      // The 16-byte pad after each SFB slot's scale operand (read as the last row's k 8-15).
      for (int slot = 0; slot < 2 * num_stages; ++slot)
        *reinterpret_cast<uint4*>(reinterpret_cast<uint8_t*>(smem_sfb + slot * Traits::kSfbSlotFloats) +
                                  Traits::kSfbBoxBytes) = make_uint4(0u, 0u, 0u, 0u);
      ptx::fence_proxy_async_shared();  // read by the wgmmas (async proxy)
    }
    ptx::fence_mbarrier_init();
  }
  // A box of fewer rows than the tile (args.a_box_rows, M below the tile): the A rows below it are never
  // loaded and hold whatever shared memory held. The wgmmas turn them into output rows >= M only
  // (a row of D depends on its own row of A alone), which the TMA store clips; zeroing them first
  // cost 1-1.6 us per launch (1x2112x7168: 12.5 -> 10.9 us without; RESULTS.md, session 21).
  const int a_box_rows = args.a_box_rows > 0 ? args.a_box_rows : BLOCK_M;
  const int sfa_box_rows = args.sfa_box_rows > 0 ? args.sfa_box_rows : Traits::kSfaBoxRows;
  // Barriers must be initialised in BOTH CTAs before anyone multicasts into or arrives on them.
  // Split-K clusters share no stages: a CTA needs its own barriers now, its peers' receive buffers
  // only at the exchange, where the math threads wait for the cluster (the producer at its end).
  // Waiting here cost 0.16-0.22 us before the first load (RESULTS.md, session 35).
  if (split_k) {
    __syncthreads();
    ptx::cluster_arrive_relaxed();  // fence_mbarrier_init() above provides the release
  } else if (cluster_size > 1) {
    ptx::cluster_sync_relaxed_arrive();
  } else {
    __syncthreads();
  }

  // With programmatic dependent launch, global memory written by the previous kernel is only
  // guaranteed visible after this point (no-op for ordinary launches).
  FP8GEMM_TIMELINE_MARK(threadIdx.x == 0, timeline::kProducerRole, 0, 4);
  ptx::griddep_wait();
  FP8GEMM_TIMELINE_MARK(threadIdx.x == 0, timeline::kProducerRole, 0, 5);

  if (warp_idx < kNumProducerThreads / 32) {
    // =============================== TMA producer warpgroup ===============================
    ptx::setmaxnreg_dec<kProducerRegisters>();
    if (warp_idx == 0 && ptx::elect_one()) {
      Scheduler scheduler(sched_params, cluster_size);
      FP8GEMM_TIMELINE_MARK(true, timeline::kProducerRole, 0, 6);
      TilePoster feed(tile_ring, tile_counter);
      TileInfo tile;
      uint32_t stage = 0, phase = 0;
      [[maybe_unused]] int timeline_tile = 0;
      while (true) {
        const bool has_tile = scheduler.next(tile, feed);
        if constexpr (kPostsTiles) feed.post(tile, has_tile);
        if (!has_tile) break;
        // Timeline events (harness-only): 0 tile start, 1 / 3 first / second k-block's stage free
        // (its loads are issued next), 2 last k-block issued; tile 0 also 4 / 5 / 6 in the prologue
        // (barriers synced, griddepcontrol.wait passed, scheduler constructed).
        FP8GEMM_TIMELINE_MARK(true, timeline::kProducerRole, timeline_tile, 0);
        int kb_begin = 0, kb_end = num_k_blocks;
        if constexpr (kTileKRange) kb_begin = tile.kb_begin, kb_end = tile.kb_end;
        // Boxes of A (and of its scales) per stage: one per wave the tile runs (kLoadPerWave).
        const int wave_loads = detail::one_wave_tile<Traits::kNumWaves>(tile, args) ? 1 : Traits::kWaveLoads;
        // The bytes of a stage (also those multicast in by the peer CTA; TMA always delivers full
        // boxes, zero-filled at the edges).
        const uint32_t stage_bytes = Traits::kTxBytesPerStage - (BLOCK_M - a_box_rows) * kBlockK -
                                     Traits::kWaveLoads * (Traits::kSfaBoxRows - sfa_box_rows) * 4 -
                                     (Traits::kWaveLoads - wave_loads) * Traits::kWaveLoadBytes +
                                     (Traits::kLoadPerWave && tile.wide ? Traits::kSmemB : 0);
        for (int kb = kb_begin; kb < kb_end; ++kb) {
          // Wait until the consumers (of both CTAs with a cluster) released this stage's previous
          // contents. On the first pass over the ring, parity phase^1 = 1 refers to the phase
          // "before" the barrier's first one, which counts as complete: no wait.
          ptx::mbar_wait(&empty_bar[stage], phase ^ 1);
          FP8GEMM_TIMELINE_MARK(kb == kb_begin, timeline::kProducerRole, timeline_tile, 1);
          FP8GEMM_TIMELINE_MARK(kb == kb_begin + 1, timeline::kProducerRole, timeline_tile, 3);
          uint64_t* bar = &full_bar[stage];
          if constexpr (kMaskShared)
            if (detail::shares_block(tile, kb)) bar = &loaded_bar[stage];  // the masking warps finish it
          uint8_t* smem_a_stage = smem_ab + stage * Traits::kSmemAB;
          uint8_t* smem_b_stage = smem_a_stage + Traits::kSmemA;
          ptx::mbar_arrive_expect_tx(bar, stage_bytes);
          constexpr uint16_t kBothCtas = 0x3;  // multicast mask: cluster ranks 0 and 1
          float* const smem_sfa_stage = smem_sfa + stage * (Traits::kSmemSFA / 4);
          // A's scales of wave w: rows from (a_row & ~3) + 128 w, of k-block kb (args.sfa_flat_ld: flat view).
          const int sfa_x = (tile.a_row + kb * args.sfa_flat_ld) & ~3, sfa_y = args.sfa_flat_ld != 0 ? 0 : kb;
          if (!tile.multicast_a) {
            for (int w = 0; w < wave_loads; ++w) {
              ptx::tma_load_2d(&tmap_a, bar, smem_a_stage + w * Traits::kALoadRows * kBlockK, kb * kBlockK,
                               tile.a_row + w * Traits::kALoadRows);
              ptx::tma_load_2d(&tmap_sfa, bar, smem_sfa_stage + w * Traits::kSfaWaveStride, sfa_x + w * 128, sfa_y);
            }
          } else if (cta_rank == 0) {
            for (int w = 0; w < wave_loads; ++w) {
              ptx::tma_load_2d_multicast(&tmap_a, bar, smem_a_stage + w * Traits::kALoadRows * kBlockK, kb * kBlockK,
                                         tile.a_row + w * Traits::kALoadRows, kBothCtas);
              ptx::tma_load_2d_multicast(&tmap_sfa, bar, smem_sfa_stage + w * Traits::kSfaWaveStride, sfa_x + w * 128,
                                         sfa_y, kBothCtas);
            }
          }
          if constexpr (kPerRowScaleB)  // each CTA loads its own slice (also with B multicast)
            ptx::tma_load_2d(&tmap_sfb, bar, smem_sfb + (2 * stage + phase) * Traits::kSfbSlotFloats,
                             Traits::kScaleMma ? tile.col_start * (Traits::kScaleOpColBytes / 8) : tile.col_start, kb);
          if (!tile.multicast_b) {
            ptx::tma_load_2d(&tmap_b, bar, smem_b_stage, kb * kBlockK, tile.b_row);
            // A wide tile (grouped 256-row kernels only): the next N-block's B tile, into the A rows
            // its one wave leaves free.
            if (Traits::kLoadPerWave && tile.wide)
              ptx::tma_load_2d(&tmap_b, bar, smem_a_stage + Traits::kALoadRows * kBlockK, kb * kBlockK,
                               tile.b_row + BLOCK_N);
          } else if (cta_rank == 0) {
            ptx::tma_load_2d_multicast(&tmap_b, bar, smem_b_stage, kb * kBlockK, tile.b_row, kBothCtas);
          }
          if (++stage == static_cast<uint32_t>(num_stages)) stage = 0, phase ^= 1;
        }
        FP8GEMM_TIMELINE_MARK(true, timeline::kProducerRole, timeline_tile, 2);
        ++timeline_tile;
      }
      // With a multicast pair, the peer's consumers arrive on OUR empty barriers (and their producer
      // multicasts into our shared memory). Before this CTA may exit, wait until every stage has
      // been released once more, i.e. all those remote arrivals have landed.
      if (stage_sharers > 1) {
        for (int i = 0; i < num_stages; ++i) {
          ptx::mbar_wait(&empty_bar[stage], phase ^ 1);
          if (++stage == static_cast<uint32_t>(num_stages)) stage = 0, phase ^= 1;
        }
      }
    } else if constexpr (kMaskShared) {
      // Warps 1-3 (96 threads) mask the k-blocks two groups share (k-grouped wgrad: a group that
      // starts or ends inside a 128-token block). They walk the same (tile, k-block) sequence as the
      // producer; for such a block they wait for its loads (loaded_bar), zero the other group's
      // tokens of the smaller operand in shared memory (B for BLOCK_N < BLOCK_M: the other's are
      // then multiplied by zero), make the writes visible to the async proxy (the wgmmas) and
      // complete full_bar, on which the math warpgroups wait as for any block. Their hot loop is
      // untouched. A row's 128 tokens are eight 16-byte chunks; the 128-byte swizzle stores logical
      // chunk c of row r at chunk c ^ (r % 8). The masking is on the pipeline's critical path
      // (a block is ready only when it is done), so it is kept short: the (at most two) chunks a
      // boundary cuts are read, masked and written back with one row per thread, the chunks wholly
      // of another group are written as zeros without reading them. loaded_bar[s] is used by masked
      // blocks only: its phase is tracked per stage (bit s of loaded_phases).
      if (warp_idx > 0) {
        constexpr int kMaskThreads = kNumProducerThreads - 32;
        constexpr bool kMaskB = BLOCK_N < BLOCK_M;
        constexpr int kRows = kMaskB ? BLOCK_N : BLOCK_M;
        constexpr int kCutRounds = (2 * kRows + kMaskThreads - 1) / kMaskThreads;  // cut chunks per thread
        const int i = static_cast<int>(threadIdx.x) - 32;
        Scheduler scheduler(sched_params, cluster_size);
        StaticTiles feed;  // k-grouped wgrad: the static order
        TileInfo tile;
        uint32_t stage = 0, loaded_phases = 0;
        while (scheduler.next(tile, feed)) {
          for (int kb = tile.kb_begin; kb < tile.kb_end; ++kb) {
            if (detail::shares_block(tile, kb)) {
              ptx::mbar_wait(&loaded_bar[stage], (loaded_phases >> stage) & 1u);
              loaded_phases ^= 1u << stage;
              // The group's tokens of this block: [lo, hi), 0 <= lo < hi <= 128.
              const int lo = max(tile.tok_begin - kb * kBlockK, 0), hi = min(tile.tok_end - kb * kBlockK, kBlockK);
              uint8_t* const rows = smem_ab + stage * Traits::kSmemAB + (kMaskB ? Traits::kSmemA : 0);
              auto chunk_at = [&](int row, int chunk) {  // logical chunk `chunk` of row `row`, swizzled
                return reinterpret_cast<uint4*>(rows + row * kBlockK + ((chunk ^ (row % 8)) * 16));
              };
              // Cut chunks: lo's if lo is inside one, hi's if hi is inside another one.
              const int cut_lo = lo % 16 != 0 ? lo / 16 : -1;
              const int cut_hi = hi % 16 != 0 && hi / 16 != cut_lo ? hi / 16 : -1;
              // Round r: item i + 96 r, the cut_lo chunk of row item (item < kRows) or the cut_hi
              // chunk of row item - kRows. All loads first, then the stores: one latency.
              uint4 cut[kCutRounds];
#pragma unroll
              for (int r = 0; r < kCutRounds; ++r) {
                const int item = i + r * kMaskThreads, row = item % kRows, chunk = item < kRows ? cut_lo : cut_hi;
                if (item < 2 * kRows && chunk >= 0)
                  cut[r] = *chunk_at(row, chunk);
              }
#pragma unroll
              for (int r = 0; r < kCutRounds; ++r) {
                const int item = i + r * kMaskThreads, row = item % kRows, chunk = item < kRows ? cut_lo : cut_hi;
                if (item < 2 * kRows && chunk >= 0) {
                  uint32_t* const v = reinterpret_cast<uint32_t*>(&cut[r]);
#pragma unroll
                  for (int w = 0; w < 4; ++w) {  // keep the bytes of tokens in [lo, hi) (little-endian)
                    const int first = 16 * chunk + 4 * w;
                    const int from = min(max(lo - first, 0), 4), to = min(max(hi - first, 0), 4);
                    v[w] &= (to == 4 ? 0xffffffffu : (1u << (8 * to)) - 1u) & ~(from == 4 ? 0xffffffffu : (1u << (8 * from)) - 1u);
                  }
                  *chunk_at(row, chunk) = cut[r];
                }
              }
              // Whole chunks of another group: chunk i % 8 of rows i / 8 + 12 j (96 threads: the
              // chunk is fixed per thread).
              const int chunk = i % 8;
              if (16 * chunk + 16 <= lo || 16 * chunk >= hi) {
                for (int row = i / 8; row < kRows; row += kMaskThreads / 8)
                  *chunk_at(row, chunk) = make_uint4(0, 0, 0, 0);
              }
              ptx::fence_proxy_async_shared();
              ptx::named_barrier_sync(kMaskBarrierId, kMaskThreads);
              if (i == 0) ptx::mbar_arrive(&full_bar[stage]);
            }
            if (++stage == static_cast<uint32_t>(num_stages)) stage = 0;
          }
        }
      }
    } else if constexpr (detail::ZeroesUnwrittenRows<Scheduler>::value) {
      // Warps 1-3 have no loads to issue: they zero the rows of D that no tile writes, while the
      // tiles run (disjoint rows: no ordering needed with the epilogue's stores).
      static_assert(Epilogue::kMasksRows, "the zeroing needs D's pointer (RowMaskEpilogueParams)");
      if (warp_idx > 0)
        Scheduler::zero_unwritten_rows(sched_params, epi_params.d,
                                       static_cast<long long>(epi_params.ld) * Epilogue::kElemBytes,
                                       static_cast<int>(warp_idx) - 1, kNumProducerThreads / 32 - 1);
    }
    if (split_k) {  // the other half of the cluster barrier arrived at above
      __syncwarp();
      ptx::cluster_wait();
    }
  } else {
    // ================================ WGMMA math warpgroups ================================
    ptx::setmaxnreg_inc<Traits::kMathRegisters>();
    const int wg = static_cast<int>(warp_idx) / 4 - 1;  // math warpgroup: rows [64*wg, 64*wg+64)
    const int tid_in_wg = static_cast<int>(threadIdx.x) % 128;
    const int row_in_wg = (static_cast<int>(warp_idx) % 4) * 16 + static_cast<int>(lane) / 4;  // and +8
    const int num_sfb_rows = (args.n + 127) / 128;

    // Descriptors of stage 0; stage s adds s * kSmemAB bytes (in 16-byte units). Only the low 32
    // bits (the start address) ever change; the two-wave loop works on them alone.
    const uint64_t desc_a0 = ptx::make_smem_desc_sw128(ptx::smem_u32(smem_ab) + wg * 64 * kBlockK);
    const uint64_t desc_b0 = ptx::make_smem_desc_sw128(ptx::smem_u32(smem_ab + Traits::kSmemA));
    const uint32_t desc_a0_lo = __shfl_sync(0xffffffffu, static_cast<uint32_t>(desc_a0), 0);
    const uint32_t desc_b0_lo = __shfl_sync(0xffffffffu, static_cast<uint32_t>(desc_b0), 0);

    detail::MathTiles<Scheduler> tiles(sched_params, cluster_size, tile_ring);
    TileInfo tile;
    uint32_t stage = 0, phase = 0;
    uint32_t tile_parity = 0;  // which of the two B-scale staging buffers this tile uses
    float acc[kNumAcc];
    // Second accumulator of the deferred-promotion loop (a 1-element dummy where it does not fit).
    float acc_next[Traits::kDeferredPromotion ? kNumAcc : 1];
#pragma unroll
    for (int i = 0; i < kNumAcc; ++i) acc[i] = 0.f;

    // ---- the steps of one 128-wide k-block, shared by both main loops below ----
    // Issue the 4 wgmmas of the k-block in `stage` into accumulator `a` (one commit group);
    // a_offset_lo / b_offset_lo move A's / B's descriptor (16-byte units, modulo 2^32): the second wave
    // of a 256-row tile (A), the second N-block of a wide tile (B, read from the A tile's free half).
    // issue_mmas: the 4 wgmmas alone (no fences, no commit).
    auto issue_mmas = [&](float (&a)[kNumAcc], uint32_t st, uint32_t a_offset_lo, uint32_t b_offset_lo) {
      const uint32_t stage_lo = st * (Traits::kSmemAB / 16);
#pragma unroll
      for (int k = 0; k < kBlockK / kWgmmaK; ++k) {
        // k * 32 bytes along the 128-byte swizzled row = k * 2 in 16-byte descriptor units.
        const uint32_t k_lo = k * (kWgmmaK / 16);
        Wgmma::mma(ptx::smem_desc_with_lo(desc_a0, desc_a0_lo + stage_lo + a_offset_lo + k_lo),
                   ptx::smem_desc_with_lo(desc_b0, desc_b0_lo + stage_lo + b_offset_lo + k_lo), a, k > 0 ? 1u : 0u);
      }
    };
    auto issue = [&](float (&a)[kNumAcc], uint32_t st, uint32_t a_offset_lo = 0, uint32_t b_offset_lo = 0) {
      ptx::fence_operands(a);
      ptx::wgmma_fence();
      issue_mmas(a, st, a_offset_lo, b_offset_lo);
      ptx::wgmma_commit();
      ptx::fence_operands(a);
    };
    // A scales of this thread's two rows in `stage` (read before the stage is released).
    // sfa_offset: this thread's first row in the stage's SFA slice (set per tile, below); the
    // second wave of a 256-row tile reads kSfaWaveOffset floats further.
    int sfa_offset = 0;
    // shift: floats from the box start to the k-block's scales in a flat view (sfa_shift; 0 else).
    auto load_sfa = [&](uint32_t st, float& r0, float& r1, int wave = 0, int shift = 0) {
      const float* sfa_stage =
          smem_sfa + st * (Traits::kSmemSFA / 4) + sfa_offset + wave * Traits::kSfaWaveOffset + shift;
      r0 = ptx::ld_shared_f32(sfa_stage);
      r1 = ptx::ld_shared_f32(sfa_stage + 8);
    };
    // Release `stage`: this warp no longer reads its shared memory. Lane r arrives on cluster rank
    // r's barrier (one lane without a cluster); with the peer gone, both on our own (set per tile).
    // The arrive does not wait for shared-memory loads still in flight. Here the only ordinary
    // loads of a stage are its A scales, issued before the stage's wgmmas and so a whole wgmma
    // group before this release; a fence would cost ~1% (RESULTS.md, session 10). Per-column B
    // scales, read right up to the release, take fence_and_release below.
    const bool release_lane = lane < stage_sharers;
    uint32_t release_rank = cta_rank;
    auto release = [&](uint32_t st) {
      if (release_lane) ptx::mbar_arrive_cluster(&empty_bar[st], release_rank);
    };
    // A flat view of A's scales (GemmKernelArgs::sfa_flat_ld) is taken by the dense decode tiles
    // only; k-block kb's scales then start sfa_shift(kb) floats into its box.
    constexpr bool kMayViewSfaFlat = BLOCK_M == 64 && !kPerRowScaleB && !Epilogue::kMasksRows;
    int kb_begin = 0;  // the tile's first k-block (set per tile); kb below counts from it
    auto sfa_shift = [&](int kb) { return kMayViewSfaFlat ? ((kb_begin + kb) * args.sfa_flat_ld) & 3 : 0; };
    auto advance = [&](uint32_t& st, uint32_t& ph) {
      if (++st == static_cast<uint32_t>(num_stages)) st = 0, ph ^= 1;
    };
    // kPerRowScaleB: per-column B scales from the SFB slot of (stage st, phase ph), read while
    // promoting; the slot stays valid until the stage's next-but-one refill (two slots per stage).
    const uint32_t sfb_thread_offset = (2u * (lane % 4u)) * 4u;  // bytes: column 2*(lane%4) of chunk 0
    // first: the tile's first k-block (a constant where called; detail::promote()'s kFirst).
    auto promote_per_column = [&](float (&o)[kNumAcc], const float (&a)[kNumAcc], float sfa0, float sfa1,
                                  uint32_t st, uint32_t ph, bool first = false) {
      const uint32_t sfb_addr = ptx::smem_u32(smem_sfb + (2 * st + ph) * Traits::kSfbSlotFloats) + sfb_thread_offset;
      if (first)
        detail::promote_per_column(std::true_type{}, o, a, sfa0, sfa1, sfb_addr);
      else
        detail::promote_per_column(std::false_type{}, o, a, sfa0, sfa1, sfb_addr);
    };
    // Release with per-column B scales: the stage's next contents (and, a pass later, this slot's)
    // arrive by TMA (the async proxy) once every warp has released it, so the warp's shared-memory
    // loads of earlier slots must be complete. The arrive alone does not wait for loads still in
    // flight; without this fence the k-grouped 128x112 wgrad read a freshly overwritten scale now
    // and then (one warp, one 8-column chunk: RESULTS.md, session 10). Measured free.
    auto fence_and_release = [&](uint32_t st) {
      ptx::fence_proxy_async_shared();
      __syncwarp();
      release(st);
    };

    // ---- B scales (128x128 blocks, row-major [cdiv(N,128)][num_k_blocks]; not kPerRowScaleB) ----
    // Staged in shared memory once per tile where GemmTraits::kSfbStagedRows says so (one LDS per
    // k-block then): row 0 = the tile's first scale block, row 1 = the next one (tiles straddling
    // two blocks), sfb_row_stride floats apart. Each math warpgroup stages and reads a copy of its
    // own, in two buffers that alternate by tile parity (a warpgroup with no rows in a tile skips
    // the epilogue's barriers, so its threads may still read tile t's scales while others stage
    // tile t+1's). The barrier after staging is one of all math threads: it keeps the two
    // warpgroups within a tile of each other, which measured 2.4% faster than a barrier per
    // warpgroup (the stage ring serves both; a warpgroup running ahead shortens it for the other).
    // The global loads of a tile are issued while the previous tile's epilogue runs (kSfbPrefetch
    // floats per thread; the rest, for K past 16K-32K, when the tile starts).
    constexpr bool kStageSfb = Traits::kSfbStagedRows > 0;
    // The other (one-wave, BLOCK_N dividing 128) tiles read them from global memory, one k-block ahead.
    constexpr bool kLdgSfb = !kPerRowScaleB && !kStageSfb;
    static_assert(!(kStageSfb && kTileKRange), "per-tile k-ranges: B scales per row or read per k-block, not staged");
    constexpr int kSfbRows = Traits::kSfbStagedRows;
    // Floats per thread loaded ahead (the rest, if any, when the tile starts). One for the grouped
    // 256-row tile (up to K = 8192 with its two staged rows): a second register made it spill.
    constexpr int kSfbPrefetch = Traits::kLoadPerWave ? 1 : 2;
    const int sfb_row_stride = args.sfb_staged_floats / (kSfbRows > 1 ? kSfbRows : 1);
    const int sfb_count = kSfbRows * num_k_blocks;  // floats staged per tile
    float sfb_prefetched[kSfbPrefetch];
    // The scale block (0, 1, 2: the row of the staged buffer) of the i-th float of a tile's B scales.
    auto sfb_row = [&](int i) { return (i >= num_k_blocks ? 1 : 0) + (kSfbRows > 2 && i >= 2 * num_k_blocks ? 1 : 0); };
    // Global address of the i-th staged float of tile t (i < sfb_count).
    auto sfb_source = [&](const TileInfo& t, int i) {
      const int block0 = t.col_start / 128;
      const int row = (Traits::kMayStraddle || kSfbRows > 1) ? sfb_row(i) : 0;
      const int block = min(block0 + row, num_sfb_rows - 1);  // later blocks clamped at the right edge
      return args.sfb + t.sfb_offset + block * num_k_blocks + (i - row * num_k_blocks);
    };
    auto sfb_target = [&](int i) { return kSfbRows > 1 ? i + sfb_row(i) * (sfb_row_stride - num_k_blocks) : i; };
    auto prefetch_sfb = [&](const TileInfo& t) {
      if constexpr (kStageSfb) {
#pragma unroll
        for (int j = 0; j < kSfbPrefetch; ++j) {
          const int i = tid_in_wg + j * 128;
          if (i < sfb_count) sfb_prefetched[j] = __ldg(sfb_source(t, i));
        }
      }
    };

    bool has_tile = tiles.first(tile);
    if (has_tile) prefetch_sfb(tile);
    // Timeline events (harness-only), by thread 0 of each math warpgroup: 0 tile start, 1 B scales
    // staged, 2 / 7 first / second k-block's data ready (7: two-wave loop; the deferred loop marks
    // k-block 16's as 8), 3 k-loop done, 4 next tile fetched, 5 / 6 after the first / second store().
    [[maybe_unused]] int timeline_tile = 0;
    [[maybe_unused]] const bool timeline_thread = tid_in_wg == 0;
    while (has_tile) {
      FP8GEMM_TIMELINE_MARK(timeline_thread, wg, timeline_tile, 0);
      // Rows of this warpgroup beyond the tile's valid rows: no output (and in the serial loop no
      // math either; stages are consumed all the same).
      const bool active = tile.row_start + wg * 64 < tile.row_end;
      sfa_offset = (tile.a_row & 3) + (detail::narrow_wide_tile<Traits, kPerRowScaleB>(tile) ? 0 : wg * 64) + row_in_wg;
      release_rank = tile.peer_active ? lane : cta_rank;

      // This tile's k-blocks: [kb_begin, kb_begin + tile_k_blocks) (all of K unless the scheduler
      // gives tiles their own range; such a range may be empty: the tile's output is then zero).
      kb_begin = 0;
      int tile_k_blocks = num_k_blocks;
      if constexpr (kTileKRange) kb_begin = tile.kb_begin, tile_k_blocks = tile.kb_end - tile.kb_begin;

      // B scales of this tile: block b0 covers tile columns [0, 8 * split), block b1 the next 128
      // (or the rest), block b2 any after those (kMaxScaleBlocks 3).
      const int split = min(BLOCK_N, (tile.col_start / 128 + 1) * 128 - tile.col_start) / 8;
      float* const sfb_tile = smem_sfb_tiles + (2 * wg + (tile_parity & 1)) * args.sfb_staged_floats;
      if constexpr (kStageSfb) {
        ++tile_parity;
#pragma unroll
        for (int j = 0; j < kSfbPrefetch; ++j) {
          const int i = tid_in_wg + j * 128;
          if (i < sfb_count) sfb_tile[sfb_target(i)] = sfb_prefetched[j];
        }
        for (int i = tid_in_wg + kSfbPrefetch * 128; i < sfb_count; i += 128)
          sfb_tile[sfb_target(i)] = __ldg(sfb_source(tile, i));
        ptx::named_barrier_sync(kMathBarrierId, Traits::kNumMathThreads);
      }
      FP8GEMM_TIMELINE_MARK(timeline_thread, wg, timeline_tile, 1);
      float sfb0_next = 0.f, sfb1_next = 0.f;
      const float* const sfb0 = sfb_source(tile, 0) + kb_begin;  // k-block kb's at sfb0[kb]
      const float* const sfb1 = sfb_source(tile, num_k_blocks) + kb_begin;
      if constexpr (kLdgSfb) {
        sfb0_next = __ldg(sfb0);
        sfb1_next = Traits::kMayStraddle ? __ldg(sfb1) : 0.f;
      }
      // The B scales of k-block kb (b1: the second block, straddling and wide tiles only); call in
      // order.
      auto tile_sfb = [&](int kb, float& b0, float& b1, bool second_block = Traits::kMayStraddle) {
        if constexpr (kStageSfb) {
          b0 = ptx::ld_shared_f32(sfb_tile + kb);
          b1 = second_block ? ptx::ld_shared_f32(sfb_tile + sfb_row_stride + kb) : 0.f;
        } else if constexpr (kLdgSfb) {
          b0 = sfb0_next, b1 = sfb1_next;
          if (kb + 1 < tile_k_blocks) {
            sfb0_next = __ldg(sfb0 + kb + 1);
            if (Traits::kMayStraddle) sfb1_next = __ldg(sfb1 + kb + 1);
          }
        } else {
          b0 = b1 = 0.f;
        }
      };

      // The tile's outputs. Every k-loop below starts by zeroing them but the two-wave one, which
      // initialises them in its first k-block's promotion instead (out = acc * scale; not in the
      // k-grouped wgrad kernels): zeroing 2 x kNumAcc registers per tile was ~9% of the warps'
      // samples at K = 512 (RESULTS.md, session 43).
      float out[kNumAcc];
      // Output of the second wave (256-row tiles; a 1-element dummy otherwise).
      constexpr int kNumWaves = Traits::kNumWaves;
      float out1[kNumWaves > 1 ? kNumAcc : 1];
      auto zero_outputs = [&](bool first = true, bool second = true) {
        if (first) {
#pragma unroll
          for (int i = 0; i < kNumAcc; ++i) out[i] = 0.f;
        }
        if (second) {
#pragma unroll
          for (int i = 0; i < (kNumWaves > 1 ? kNumAcc : 1); ++i) out1[i] = 0.f;
        }
      };
      const bool active1 = kNumWaves > 1 && tile.row_start + 128 + wg * 64 < tile.row_end;

      bool deferred = false;
      // Set where the k-loop stored wave 0's slice itself (the last k-block of a short-K twin or of
      // a k-grouped two-wave tile).
      bool first_slice_stored = false;
      // In that last k-block (last_c), wave 0's slice goes out once wave 1's wgmmas are done and
      // the stage is released, before wave 1's promotion: the store overlaps the other warpgroup's
      // wgmmas instead of following the tile.
      auto store_first_slice_during = [&](int wave, auto last_c) {
        if constexpr (decltype(last_c)::value) {
          // (A row-masking epilogue must not be called for a warpgroup without rows.)
          if (wave == 1 && (!Epilogue::kMasksRows || active)) {
            Epilogue::store(out, smem_d, &tmap_d, tile, wg, /*slice=*/wg, tid_in_wg, epi_params);
            first_slice_stored = true;
          }
        }
      };
      if constexpr (Traits::kDeferredPromotion) deferred = args.deferred_promotion != 0;
      if (kTileKRange && tile_k_blocks <= 0) {
        // Empty k-range (an empty group of the k-grouped GEMM): no stage is consumed, the
        // epilogue writes the zero tile.
        zero_outputs();
      } else if (deferred) {
        if constexpr (Traits::kDeferredPromotion) {
          zero_outputs();
          // Deferred promotion: the wgmmas of k-block kb+1 are issued (into the other accumulator)
          // before k-block kb is promoted, so the tensor cores always have this warpgroup's next
          // block queued while the CUDA cores promote. Costs a second accumulator array (tiles with
          // 3 * BLOCK_N / 2 accumulators that fit the register budget) and holds each stage one
          // k-block longer. All rows are computed (rows past M read as TMA zeros); only the
          // epilogue looks at `active`.
          // The tile's B-scale split is dispatched once per tile, as in the serial loop.
          // flat_c: A's scales in a flat view. The loop is compiled with and without it: computing
          // the shift in every k-block also where it is 0 cost 64x2112x7168 2-4% (RESULTS.md, session 28).
          auto deferred_loop = [&](auto split_c, auto flat_c) {
            [[maybe_unused]] constexpr int kSplit = decltype(split_c)::value;  // not with per-column B scales
            constexpr bool kFlat = decltype(flat_c)::value;
            float sfa0, sfa1;
            ptx::mbar_wait(&full_bar[stage], phase);
            FP8GEMM_TIMELINE_MARK(timeline_thread, wg, timeline_tile, 2);
            load_sfa(stage, sfa0, sfa1, 0, kFlat ? sfa_shift(0) : 0);
            issue(acc, stage);
            // One k-block: `cur` is in flight on entry; `nxt` (promoted last time) is free.
            // Promote k-block kb from `cur` (its group already waited for) and move to the next stage.
            auto finish = [&](float (&cur)[kNumAcc], float sfb0_cur, float sfb1_cur, uint32_t next_stage,
                              uint32_t next_phase, float nsfa0, float nsfa1) {
              ptx::fence_operands(cur);
              if constexpr (kPerRowScaleB) {
                fence_and_release(stage);
                promote_per_column(out, cur, sfa0, sfa1, stage, phase);
              } else {
                release(stage);
                detail::promote<kSplit>(out, cur, sfa0 * sfb0_cur, sfa1 * sfb0_cur, sfa0 * sfb1_cur, sfa1 * sfb1_cur);
              }
              stage = next_stage, phase = next_phase;
              sfa0 = nsfa0, sfa1 = nsfa1;
            };
            // k-block kb is in flight in `cur`: issue kb+1 into `nxt`, then promote kb.
            auto step_next = [&](float (&cur)[kNumAcc], float (&nxt)[kNumAcc], int kb) {
              float sfb0_cur, sfb1_cur;
              tile_sfb(kb, sfb0_cur, sfb1_cur);
              uint32_t next_stage = stage, next_phase = phase;
              advance(next_stage, next_phase);
              float nsfa0, nsfa1;
              ptx::mbar_wait(&full_bar[next_stage], next_phase);
              FP8GEMM_TIMELINE_MARK(timeline_thread && kb + 1 == 16, wg, timeline_tile, 8);
              load_sfa(next_stage, nsfa0, nsfa1, 0, kFlat ? sfa_shift(kb + 1) : 0);
              issue(nxt, next_stage);
              ptx::wgmma_wait<1>();  // k-block kb's group is done; kb+1's stays in flight
              finish(cur, sfb0_cur, sfb1_cur, next_stage, next_phase, nsfa0, nsfa1);
            };
            // The tile's last k-block.
            auto step_last = [&](float (&cur)[kNumAcc], int kb) {
              float sfb0_cur, sfb1_cur;
              tile_sfb(kb, sfb0_cur, sfb1_cur);
              uint32_t next_stage = stage, next_phase = phase;
              advance(next_stage, next_phase);
              ptx::wgmma_wait<0>();
              finish(cur, sfb0_cur, sfb1_cur, next_stage, next_phase, 0.f, 0.f);
            };
            int kb = 0;
            for (; kb + 2 < tile_k_blocks; kb += 2) {
              step_next(acc, acc_next, kb);
              step_next(acc_next, acc, kb + 1);
            }
            if (tile_k_blocks - kb == 2) {
              step_next(acc, acc_next, kb);
              step_last(acc_next, kb + 1);
            } else {
              step_last(acc, kb);
            }
            // Already drained on every real path; says so to ptxas, which otherwise assumes the
            // prologue's group may still be in flight (num_k_blocks == 0) and serializes all wgmmas.
            ptx::wgmma_wait<0>();
          };
          auto deferred_loops = [&](auto split_c) {
            if (kMayViewSfaFlat && args.sfa_flat_ld != 0)
              deferred_loop(split_c, std::bool_constant<kMayViewSfaFlat>{});
            else
              deferred_loop(split_c, std::false_type{});
          };
          if constexpr (Traits::kMayStraddle && !kPerRowScaleB)
            detail::dispatch_split<Traits::kScaleGcd / 8, Traits::kScaleGcd / 8, Traits::kSplitMax>(split, deferred_loops);
          else
            deferred_loops(std::integral_constant<int, kNumAcc / 4>{});
        }
      } else if constexpr (kNumWaves > 1) {
        // Two waves, serial promotion: per k-block, wave 0's wgmmas, wait, promote into `out`,
        // then wave 1's into `out1`; the stage is released once wave 1's wgmmas are done (per-column
        // B scales stay readable in their slot). The two math warpgroups' promotions overlap each
        // other's wgmmas. Rows past M are computed from TMA zeros (the epilogue does not store
        // them). BLOCK_N = 128: one B-scale block per tile.
        // A tile with at most 128 valid rows (one_wave_tile: the partial last tile of a group, or
        // of M) has rows in the first wave of each warpgroup only: it runs the loop compiled for
        // one wave (half the wgmmas and promotions; out1 stays zero and is not stored). Full tiles
        // run the two-wave loop unchanged. A wide tile (grouped kernels) runs the two-wave loop with
        // wave 1 on wave 0's rows against the second N-block's B tile and B scales.
        static_assert(kPerRowScaleB || (!Traits::kMayStraddle && BLOCK_N == 128),
                      "256-row tiles are 128 wide (one B-scale block), or have per-row B scales");
        // Wave 1 of a wide tile: A as wave 0; B kSmemA - kALoadRows * 128 bytes before the B tile.
        constexpr uint32_t kWideBOffset = static_cast<uint32_t>(-(Traits::kSmemA - Traits::kALoadRows * kBlockK) / 16);
        // The tile's first k-block is peeled off: its promotion initialises the outputs (every tile
        // has one: K >= 1, and per-tile k-ranges, which may be empty, are not peeled).
        auto wave_loop = [&](auto waves_c, auto wide_c) {
          constexpr int kWaves = decltype(waves_c)::value;
          constexpr bool kWide = decltype(wide_c)::value;
          // Not in the k-grouped wgrad kernels (per-tile k-ranges): there the peeled copy made ptxas spill.
          constexpr bool kPeelFirst = !kTileKRange;
          if (!kPeelFirst || kWaves < kNumWaves) zero_outputs(/*first=*/!kPeelFirst);  // one-wave tiles: out1 unused
          // Whether the next k-block's stage is known to be full: tested (without suspending) before
          // the last wave's promotion, so that the test's latency hides behind the promotion's FFMAs
          // in every k-block. ptxas does that by itself only inside the unrolled copies, not across
          // the loop's back edge nor in its remainder loop (up to 7 k-blocks of one copy each):
          // +0.65% at 4096x7168x2048, +0.4% at 4096x7168x4096, even at K >= 7168; grouped +0.3-1.6%
          // on ten of thirteen cases (H200, session 54; 256x1024 uneven's -2.9% there is within that
          // case's run-to-run spread, and testing in full narrow tiles only lost elsewhere: session 55).
          // Not in the short-K twins: their straight-line copies get that from ptxas, and with the
          // test they spilled.
          constexpr bool kTestNext = kMaxTileKBlocks == 0;
          bool next_full = false;
          auto k_block_at = [&](int kb, auto first_c, auto last_c) {
            float sfb, sfb_wide;
            tile_sfb(kb, sfb, sfb_wide, kWide);
            if (!next_full) ptx::mbar_wait(&full_bar[stage], phase);
            FP8GEMM_TIMELINE_MARK(timeline_thread && kb == 0, wg, timeline_tile, 2);
            FP8GEMM_TIMELINE_MARK(timeline_thread && kb == 1, wg, timeline_tile, 7);
#pragma unroll
            for (int wave = 0; wave < kWaves; ++wave) {
              float sfa0, sfa1;
              load_sfa(stage, sfa0, sfa1, kWide ? 0 : wave);
              if (kWide && wave == 1)
                issue(acc, stage, 0, kWideBOffset);
              else
                issue(acc, stage, wave * (128 * kBlockK / 16));
              ptx::wgmma_wait<0>();
              ptx::fence_operands(acc);
              if constexpr (kPerRowScaleB) {
                if (wave == kWaves - 1) fence_and_release(stage);
                store_first_slice_during(wave, last_c);
                promote_per_column(wave == 0 ? out : out1, acc, sfa0, sfa1, stage, phase, decltype(first_c)::value);
              } else {
                if (wave == kWaves - 1) {
                  release(stage);
                  if constexpr (kTestNext) {
                    uint32_t next_stage = stage, next_phase = phase;
                    advance(next_stage, next_phase);
                    next_full = ptx::mbar_test_wait(&full_bar[next_stage], next_phase);
                  }
                }
                store_first_slice_during(wave, last_c);
                const float b = (kWide && wave == 1) ? sfb_wide : sfb;
                detail::promote<kNumAcc / 4, decltype(first_c)::value>(wave == 0 ? out : out1, acc, sfa0 * b,
                                                                       sfa1 * b, 0.f, 0.f);
              }
            }
            advance(stage, phase);
          };
          auto k_block = [&](int kb, auto first_c) { k_block_at(kb, first_c, std::false_type{}); };
          // Short-K kernels (at most kMaxTileKBlocks k-blocks per tile, K <= 512, 1024, 1536 or
          // 2048): one straight-line copy per k-block count of the twin's span. Without the loop's
          // back edge, ptxas issues each k-block's barrier wait among the previous promotion's FFMAs
          // (DeepGEMM compiles K in); the loop below stays as the catch-all.
          // Their last k-block stores wave 0's slice before promoting wave 1, so that the store
          // overlaps the other warpgroup's wgmmas: +0-5% at K = 256-512, never slower, and with
          // the second twin +1-3% at K = 640-1024 over the loop kernel, the third +0.1-1.7% at
          // K = 1152-1536 (sessions 49-50). Storing it while this warpgroup's own wave-1 wgmmas run
          // (before the release) lost up to 3%; in the loop's last k-block it gained nothing
          // (-0.4..+0.6% at K = 1024-16384). H200, harness, RESULTS.md.
          if constexpr (kMaxTileKBlocks > 0 && kPeelFirst && kWaves == 2 && !kWide) {
            constexpr int kFirstCount = kMaxTileKBlocks - kShortKTwinSpan + 1;
            const bool straight = detail::dispatch_value<kFirstCount, 1, kMaxTileKBlocks>(tile_k_blocks, [&](auto count_c) {
              constexpr int kCount = decltype(count_c)::value;
              if constexpr (kCount == 1) {
                k_block_at(0, std::true_type{}, std::true_type{});
              } else {
                k_block(0, std::true_type{});
#pragma unroll
                for (int kb = 1; kb < kCount - 1; ++kb) k_block(kb, std::false_type{});
                k_block_at(kCount - 1, std::false_type{}, std::true_type{});
              }
            });
            if (straight) return;
          }
          // Per-tile k-ranges (the k-grouped wgrad, >= 1 k-block here): the last k-block is peeled
          // off to store wave 0's slice during it, as the short-K twins do.
          if constexpr (kTileKRange && kWaves == 2 && !kWide) {
#pragma unroll kTwoWaveUnroll<Epilogue::kElemBytes>
            for (int kb = 0; kb + 1 < tile_k_blocks; ++kb) k_block(kb, std::false_type{});
            k_block_at(tile_k_blocks - 1, std::false_type{}, std::true_type{});
            return;
          }
          if constexpr (kPeelFirst) k_block(0, std::true_type{});
#pragma unroll kTwoWaveUnroll<Epilogue::kElemBytes>
          for (int kb = kPeelFirst ? 1 : 0; kb < tile_k_blocks; ++kb) k_block(kb, std::false_type{});
        };
        // (Wide tiles exist in kLoadPerWave kernels only; elsewhere this instantiates the narrow loop.)
        using Narrow = std::false_type;
        if constexpr (Traits::kScaleMma) {
          // Wide tiles are the grouped GEMM's; A's two waves come in one box (dense) or two (k-grouped),
          // 128 rows apart either way.
          static_assert(!Traits::kLoadPerWave || kMaskShared, "no wide tiles with the scale products on the tensor cores");
          // The scale products of the wave.
          float pscale[kNumAcc];
          // The two-wave loop with the scale products on the tensor cores (GemmTraits::
          // kScaleMma). Per wave: the 4 fp8 wgmmas and the bf16 one of P = sa * sb, one commit
          // group, then out += acc * P. A's operand of the next wave (this thread's two rows) is
          // read while a wave runs: that of wave 1 during wave 0, that of the next k-block's wave 0
          // during the last wave (it waits for the next stage there).
          auto scale_mma_loop = [&](auto waves_c) {
            constexpr int kWaves = decltype(waves_c)::value;
            // A's operand of a wave: (hi, lo) at k 2(t%4) + 0/1 for t%4 < 2, else 0. The SFA slot
            // holds A's scale operand (WgradGemmProblem::sfa_ops): each row's bf16 pair, ready-made.
            const bool sa_lane = lane % 4 < 2;
            auto load_scale_a = [&](uint32_t st, int wave, uint32_t& a0, uint32_t& a1) {
              float sfa0, sfa1;
              load_sfa(st, sfa0, sfa1, wave);
              a0 = sa_lane ? __float_as_uint(sfa0) : 0u;
              a1 = sa_lane ? __float_as_uint(sfa1) : 0u;
            };
            constexpr uint32_t kCoreBytes = 8 * Traits::kScaleOpColBytes;  // 8 columns' core matrix
            auto issue_wave = [&](int wave, uint32_t a0, uint32_t a1) {
              ptx::fence_operands(acc);
              ptx::fence_operands(pscale);
              ptx::wgmma_fence();
              issue_mmas(acc, stage, wave * (128 * kBlockK / 16), 0);
              const uint32_t ops = ptx::smem_u32(smem_sfb + (2 * stage + phase) * Traits::kSfbSlotFloats);
              ptx::WgmmaBf16N96::mma(a0, a1, 0u, 0u,
                                     ptx::make_smem_desc_interleave(ops, Traits::kScaleOpColBytes, kCoreBytes),
                                     pscale, 0u);
              ptx::wgmma_commit();
              ptx::fence_operands(acc);
              ptx::fence_operands(pscale);
            };
            zero_outputs();
            if (tile_k_blocks <= 0) return;
            ptx::mbar_wait(&full_bar[stage], phase);
            FP8GEMM_TIMELINE_MARK(timeline_thread, wg, timeline_tile, 2);
            uint32_t a0, a1;  // A's operand of the next wave
            load_scale_a(stage, 0, a0, a1);
            // One k-block; the k-grouped two-wave tiles store wave 0's slice during their last
            // (last_c), as the loop above does.
            auto k_block = [&](int kb, auto last_c) {
#pragma unroll
              for (int wave = 0; wave < kWaves; ++wave) {
                issue_wave(wave, a0, a1);
                uint32_t next_a0 = 0u, next_a1 = 0u;
                if (wave + 1 < kWaves) {
                  load_scale_a(stage, wave + 1, next_a0, next_a1);
                } else if (kb + 1 < tile_k_blocks) {
                  uint32_t next_stage = stage, next_phase = phase;
                  advance(next_stage, next_phase);
                  ptx::mbar_wait(&full_bar[next_stage], next_phase);
                  FP8GEMM_TIMELINE_MARK(timeline_thread && kb == 0, wg, timeline_tile, 7);
                  load_scale_a(next_stage, 0, next_a0, next_a1);
                }
                ptx::wgmma_wait<0>();
                ptx::fence_operands(acc);
                ptx::fence_operands(pscale);
                asm volatile("" : "+r"(a0), "+r"(a1));  // the wgmma's A registers live until here
                // The stage's A scales were read before its wgmmas (into registers).
                if (wave == kWaves - 1) release(stage);
                store_first_slice_during(wave, last_c);
                float (&o)[kNumAcc] = wave == 0 ? out : out1;
#pragma unroll
                for (int i = 0; i < kNumAcc; ++i) o[i] = fmaf(acc[i], pscale[i], o[i]);
                a0 = next_a0, a1 = next_a1;
              }
              advance(stage, phase);
            };
            if constexpr (kTileKRange && kWaves == 2) {
#pragma unroll kScaleMmaUnroll
              for (int kb = 0; kb + 1 < tile_k_blocks; ++kb) k_block(kb, std::false_type{});
              k_block(tile_k_blocks - 1, std::true_type{});
            } else {
#pragma unroll kScaleMmaUnroll
              for (int kb = 0; kb < tile_k_blocks; ++kb) k_block(kb, std::false_type{});
            }
          };
          if (detail::one_wave_tile<kNumWaves>(tile, args))
            scale_mma_loop(std::integral_constant<int, 1>{});
          else
            scale_mma_loop(std::integral_constant<int, kNumWaves>{});
        } else if (Traits::kLoadPerWave && tile.wide) {
          if (detail::narrow_wide_tile<Traits, kPerRowScaleB>(tile)) {
            // A wide tile of at most 64 rows: warpgroup 0 would run both waves in series while
            // warpgroup 1 has no rows. Instead each runs one wave on rows 0..63 in parallel:
            // warpgroup 0 against N-block 0, warpgroup 1 (A 64 rows back, B and B scales of the
            // second N-block) against N-block 1, both into `out`.
            const uint32_t a_offset = wg == 1 ? static_cast<uint32_t>(-(64 * kBlockK / 16)) : 0u;
            const uint32_t b_offset = wg == 1 ? kWideBOffset : 0u;
            zero_outputs();
#pragma unroll 4
            for (int kb = 0; kb < tile_k_blocks; ++kb) {
              float sfb, sfb_wide;
              tile_sfb(kb, sfb, sfb_wide, true);
              ptx::mbar_wait(&full_bar[stage], phase);
              float sfa0, sfa1;
              load_sfa(stage, sfa0, sfa1);
              issue(acc, stage, a_offset, b_offset);
              ptx::wgmma_wait<0>();
              ptx::fence_operands(acc);
              release(stage);
              const float b = wg == 1 ? sfb_wide : sfb;
              detail::promote<kNumAcc / 4>(out, acc, sfa0 * b, sfa1 * b, 0.f, 0.f);
              advance(stage, phase);
            }
          } else {
            wave_loop(std::integral_constant<int, 2>{}, std::integral_constant<bool, Traits::kLoadPerWave>{});
          }
        } else if (detail::one_wave_tile<kNumWaves>(tile, args))
          wave_loop(std::integral_constant<int, 1>{}, Narrow{});
        else
          wave_loop(std::integral_constant<int, kNumWaves>{}, Narrow{});
      } else {
        // Serial promotion (DeepGEMM's order): issue, wait, release, promote; the two math
        // warpgroups' promotions overlap each other's wgmmas. The tile's B-scale split is
        // dispatched once, outside the loop (one copy of the loop per possible split, as DeepGEMM
        // does), and so is `active` (a warpgroup without rows in the tile only waits for and
        // releases the stages), so that the loop body has no branch and unrolls: with the promotion
        // in a branch, ptxas could not move the next k-block's barrier wait and descriptor
        // arithmetic up into it.
        zero_outputs();
        auto serial_loop = [&](auto split_c, auto active_c) {
          [[maybe_unused]] constexpr int kSplit = decltype(split_c)::value;  // not with per-column B scales
          constexpr bool kActive = decltype(active_c)::value;
#pragma unroll kSerialUnroll<Traits::kSplitCopies>
          for (int kb = 0; kb < tile_k_blocks; ++kb) {
            float sfb0_cur = 0.f, sfb1_cur = 0.f, sfb2_cur = 0.f;
            if constexpr (kActive) tile_sfb(kb, sfb0_cur, sfb1_cur);
            if constexpr (kActive && kSfbRows > 2) sfb2_cur = ptx::ld_shared_f32(sfb_tile + 2 * sfb_row_stride + kb);
            ptx::mbar_wait(&full_bar[stage], phase);
            float sfa0 = 0.f, sfa1 = 0.f;
            if constexpr (kActive) {
              load_sfa(stage, sfa0, sfa1, 0, sfa_shift(kb));
              issue(acc, stage);
              ptx::wgmma_wait<0>();
              ptx::fence_operands(acc);
            }
            if constexpr (kPerRowScaleB) {
              fence_and_release(stage);
              if constexpr (kActive) promote_per_column(out, acc, sfa0, sfa1, stage, phase);
            } else {
              release(stage);
              if constexpr (kActive)
                detail::promote<kSplit>(out, acc, sfa0 * sfb0_cur, sfa1 * sfb0_cur, sfa0 * sfb1_cur, sfa1 * sfb1_cur,
                                        sfa0 * sfb2_cur, sfa1 * sfb2_cur);
            }
            advance(stage, phase);
          }
        };
        auto serial_loops = [&](auto split_c) {
          if (active)
            serial_loop(split_c, std::true_type{});
          else
            serial_loop(split_c, std::false_type{});
        };
        if constexpr (Traits::kMayStraddle && !kPerRowScaleB)
          detail::dispatch_split<Traits::kScaleGcd / 8, Traits::kScaleGcd / 8, Traits::kSplitMax>(split, serial_loops);
        else
          serial_loops(std::integral_constant<int, kNumAcc / 4>{});
      }

      FP8GEMM_TIMELINE_MARK(timeline_thread, wg, timeline_tile, 3);
      // Staging tiles: the next tile, and its B scales' global loads, before this tile's epilogue
      // (which hides their latency); the others after it (fewer live registers in the epilogue).
      TileInfo next_tile = tile;
      bool has_next = false;
      if constexpr (kStageSfb) {
        has_next = tiles.next(next_tile);
        if (has_next) prefetch_sfb(next_tile);
      }
      FP8GEMM_TIMELINE_MARK(timeline_thread, wg, timeline_tile, 4);

      if (split_k) {
        // Split-K: the cluster's partial tiles added in the owners of their rows, which store them.
        if constexpr (kMaySplitK) {
          using OutT = std::conditional_t<Epilogue::kElemBytes == 2, __nv_bfloat16, float>;
          const uint32_t warp = 4 * static_cast<uint32_t>(wg) + static_cast<uint32_t>(tid_in_wg) / 32;  // math warp
          ptx::cluster_wait();  // the peers' receive buffers and barriers are initialised
          const bool owns =
              split_k::reduce<Traits::kNumMathThreads / 32>(out, split_buf, args.k_splits, cta_rank, warp, lane);
          FP8GEMM_TIMELINE_MARK(timeline_thread, wg, timeline_tile, 7);  // reduced (or sent)
          if (owns) split_k::store_rows<OutT>(out, args.d, args.ld_d, tile, warp, lane);
#ifdef FP8GEMM_EXPERIMENT_SPLITK_LATE_WAIT  // (the bytes must be in before this CTA exits)
          if (owns) ptx::mbar_wait(split_k::barrier_of(split_buf, BLOCK_M, BLOCK_N, args.k_splits), 0);
#endif
        }
      } else if (detail::narrow_wide_tile<Traits, kPerRowScaleB>(tile)) {
        // Warpgroup 0: N-block 0 of rows 0..63, as any tile's first slice. Warpgroup 1: N-block 1
        // of the same rows, as its first slice (its own staging rows) of a tile 64 rows higher and
        // BLOCK_N columns further. A first slice waits for all of the warpgroup's earlier TMA stores
        // to read their rows; as slice 3 it waited for all but the newest, which is the last tile's
        // slice 3, into the same rows. (One store call: a second one kept `out` live and made
        // ptxas spill.)
        TileInfo target = tile;
        if (wg == 1) target.row_start -= 64, target.col_start += BLOCK_N;
        Epilogue::store(out, smem_d, &tmap_d, target, wg, /*slice=*/wg, tid_in_wg, epi_params);
      } else if (active && !first_slice_stored) {
        Epilogue::store(out, smem_d, &tmap_d, tile, wg, /*slice=*/wg, tid_in_wg, epi_params);
      }
      FP8GEMM_TIMELINE_MARK(timeline_thread, wg, timeline_tile, 5);
      if constexpr (kNumWaves > 1) {
        if (Traits::kLoadPerWave && tile.wide) {
          // The second N-block of a wide tile: wave 0's rows, BLOCK_N columns further. Stored as
          // slice 2 + wg (its own staging rows) of a tile 128 rows higher, so that the slice's
          // rows are this warpgroup's rows of the tile. (A narrow one's is stored above.)
          TileInfo second = tile;
          second.row_start -= 128;
          second.col_start += BLOCK_N;
          if (active && !detail::narrow_wide_tile<Traits, kPerRowScaleB>(tile))
            Epilogue::store(out1, smem_d, &tmap_d, second, wg, /*slice=*/2 + wg, tid_in_wg, epi_params);
        } else if (active1) {
          Epilogue::store(out1, smem_d, &tmap_d, tile, wg, /*slice=*/2 + wg, tid_in_wg, epi_params);
        }
      }
      FP8GEMM_TIMELINE_MARK(timeline_thread, wg, timeline_tile, 6);
      if constexpr (!kStageSfb) has_next = tiles.next(next_tile);
      tile = next_tile;
      has_tile = has_next;
      ++timeline_tile;
    }
    Epilogue::finish(tid_in_wg);
    FP8GEMM_TIMELINE_HEADER(timeline_thread && wg == 0, 1, 3);
  }
#endif
}


// ------------------------------------------------------------------------------------------------
// Host-side registry of the compiled kernels.
//
// Each fp8_gemm_inst_*.cu explicitly instantiates kernel_entry<BM, BN, out> (which instantiates the
// kernel); fp8_gemm.cu only sees `extern template` declarations, so the kernels are compiled once,
// in parallel translation units. FP8GEMM_COMPILED_TILES must list the same tiles as
// kCompiledTiles in fp8_gemm.h (checked by a static_assert in fp8_gemm.cu).
// ------------------------------------------------------------------------------------------------
#define FP8GEMM_COMPILED_TILES(X) \
  X(128, 112) X(128, 128) X(128, 144) X(128, 160) X(128, 176) X(128, 192) X(256, 128) X(128, 32) X(128, 64) X(64, 32) X(64, 64) \
  X(64, 128) X(64, 192)
// Short-K twins of compiled tiles, X(BM, BN, max k-blocks): kernels whose tiles have at most that
// many k-blocks (DenseScheduler's kMaxKBlocks), launched instead of the tile's kernel when K fits;
// bf16 output only (the 256-row tiles are offered for bf16 only: offered() in fp8_gemm.cu).
// 256x128, K <= 512: the two-wave loop's back edge costs 2% there (benchmarks/RESULTS.md, session 44);
// K = 640..1024: with the early store of the last k-block, +1-3% over the loop kernel (session 49);
// K = 1040..1536: +0.1-1.7% (4096x24576x1536 +1.0%; session 50). find_entry takes the first twin
// that fits: a tile runs the copy of its own k-block count only (kShortKTwinSpan). The twins from
// the second one post their tiles (below). The fourth (K = 1552..2048) runs only where the tiles
// fill kMinWaves16 waves of the SMs (short_k_twin_min_waves). Two lists, two translation units
// that compile in parallel: the fourth twin alone takes as long to compile as the other three.
#define FP8GEMM_SHORT_K_TILES_TO_12(X) X(256, 128, 4) X(256, 128, 8) X(256, 128, 12)
#define FP8GEMM_SHORT_K_TILES_16(X) X(256, 128, 16)
#define FP8GEMM_SHORT_K_TILES(X) FP8GEMM_SHORT_K_TILES_TO_12(X) FP8GEMM_SHORT_K_TILES_16(X)
// Posted loop kernels, X(BM, BN, max k-blocks): the tile's loop kernel with posted tiles
// (DenseScheduler's kPostTiles), for at most that many k-blocks, after the short-K twins; bf16
// output only. 256x128 against the unposted kernel, harness, H200 (RESULTS.md, session 53):
// K = 640..2048 +0.3-1.4%, 2560..4096 +0.1-0.6%, 5120 / 6144 even, K >= 7168 -0.1 to -0.4%
// (the producer's post and the readers' arrivals then buy nothing). K <= 512 (the first twin): -0.5%.
#define FP8GEMM_POSTED_LOOP_TILES(X) X(256, 128, 32)

namespace detail {

struct KernelEntry {
  int block_m = 0, block_n = 0;
  OutDtype out = OutDtype::kBF16;
  const void* fn = nullptr;  // the __global__ function (for cudaLaunchKernelExC & attributes)
  int num_threads = 0;
  int smem_fixed = 0;      // epilogue shared memory
  int smem_per_stage = 0;  // per pipeline stage (tiles + SFA + barriers)
  int d_box_cols = 0, d_box_rows = 0, d_swizzle_bytes = 0;  // TMA store box / swizzle of the D map
  int out_elem_bytes = 0;
  int sfa_box_rows = 0;  // floats of A's scales per TMA load (GemmTraits::kSfaBoxRows)
  int a_load_rows = 0;   // rows of A per TMA load (GemmTraits::kALoadRows)
  int sfb_staged_rows = 0;  // rows of B scales staged per tile (GemmTraits::kSfbStagedRows)
  bool scale_ops = false;   // B's scale operand instead of its scales (GemmTraits::kScaleMma)
  int max_k_blocks = 0;     // > 0: launched for at most this many k-blocks (short-K, posted loop)
  int min_waves = 0;        // launched only where the tiles fill at least this many waves of the SMs
  bool posts_tiles = false;  // the producer posts the tiles into a TileRing (its shared memory)
};

// The waves of tiles from which a short-K twin is launched. The fourth twin (13-16 k-blocks)
// against the posted loop kernel, 256x128 pairs, harness, H200 (RESULTS.md, session 54): +0.4 to
// +1.5% from 23 waves (4096x24576x2048, 4096x32768x1792, 16384x14336x1664, 32768x7168x2048), but
// -0.8 to -3% up to 15.5 (-2.9 us at 4096x7168x2048): it costs ~2-3 us per launch, as in session
// 51, where every CTA's first tile fetches its 50 KB of straight-line code. The other twins gain
// at every wave count. Against the posted loop kernel with its early test of the next stage
// (+0.65% at K = 2048), the margin above the gate is 0 to +0.7% (session 55).
constexpr int kMinWaves16 = 20;
constexpr int short_k_twin_min_waves(int max_k_blocks) { return max_k_blocks > 12 ? kMinWaves16 : 0; }

template <OutDtype kOut>
using OutElement = typename std::conditional<kOut == OutDtype::kBF16, __nv_bfloat16, float>::type;

// The entry of one kernel instantiation; the dense, grouped and wgrad registries all use it.
// Taking the kernel's address here instantiates it.
template <int BLOCK_M, int BLOCK_N, class Epi, class Scheduler, bool kPerRowScaleB = false>
KernelEntry make_kernel_entry(OutDtype out) {
  using Traits = GemmTraits<BLOCK_M, BLOCK_N, Epi, kPerRowScaleB, detail::MasksSharedBlocks<Scheduler>::value>;
  KernelEntry e;
  e.block_m = BLOCK_M;
  e.block_n = BLOCK_N;
  e.out = out;
  e.fn = reinterpret_cast<const void*>(&sm90_fp8_gemm_kernel<BLOCK_M, BLOCK_N, Epi, Scheduler, kPerRowScaleB>);
  e.num_threads = Traits::kNumThreads;
  e.smem_fixed = Traits::kSmemFixed;
  e.smem_per_stage = Traits::kSmemPerStage;
  e.scale_ops = Traits::kScaleMma;
  e.d_box_cols = Epi::kAtomCols;
  e.d_box_rows = Epi::kBoxRows;
  e.d_swizzle_bytes = Epi::kAtomBytes;
  e.sfa_box_rows = Traits::kSfaBoxRows;
  e.a_load_rows = Traits::kALoadRows;
  e.sfb_staged_rows = Traits::kSfbStagedRows;
  e.out_elem_bytes = Epi::kElemBytes;
  e.max_k_blocks = MaxTileKBlocks<Scheduler>::value;
  e.min_waves = short_k_twin_min_waves(e.max_k_blocks);
  e.posts_tiles = detail::PostsTiles<Scheduler>::value;
  return e;
}

// A dense kernel's entry: the tile's loop kernel, a short-K twin (kMaxKBlocks > 0;
// FP8GEMM_SHORT_K_TILES) or a posted loop kernel (kPostedLoopMaxKBlocks > 0; FP8GEMM_POSTED_LOOP_TILES).
template <int BLOCK_M, int BLOCK_N, OutDtype kOut, int kMaxKBlocks = 0, int kPostedLoopMaxKBlocks = 0>
KernelEntry kernel_entry() {
  static_assert(kMaxKBlocks == 0 || kPostedLoopMaxKBlocks == 0, "a twin or a posted loop kernel");
  constexpr bool kPost = kPostedLoopMaxKBlocks > 0 || kMaxKBlocks > kShortKTwinSpan;
  using Epi = TmaStoreEpilogue<BLOCK_M, BLOCK_N, OutElement<kOut>>;
  KernelEntry e = make_kernel_entry<BLOCK_M, BLOCK_N, Epi, DenseScheduler<BLOCK_M, BLOCK_N, kMaxKBlocks, kPost>>(kOut);
  if (kPostedLoopMaxKBlocks > 0) e.max_k_blocks = kPostedLoopMaxKBlocks;
  return e;
}

}  // namespace detail

// The bf16 and f32 entries of one tile: explicit instantiations (KEYWORD = template) in the
// fp8_gemm_inst_*.cu files, their declarations (KEYWORD = extern template) in fp8_gemm.cu.
// Use at global scope.
#define FP8GEMM_ENTRIES_BOTH_DTYPES(KEYWORD, ENTRY, BM, BN) \
  namespace fp8gemm {                                        \
  namespace detail {                                         \
  KEYWORD KernelEntry ENTRY<BM, BN, OutDtype::kBF16>();      \
  KEYWORD KernelEntry ENTRY<BM, BN, OutDtype::kF32>();       \
  }                                                          \
  }

#define FP8GEMM_INSTANTIATE_TILE(BM, BN) FP8GEMM_ENTRIES_BOTH_DTYPES(template, kernel_entry, BM, BN)
#define FP8GEMM_EXTERN_TILE(BM, BN) FP8GEMM_ENTRIES_BOTH_DTYPES(extern template, kernel_entry, BM, BN)

// The bf16 entry of a K-bound kernel: kernel_entry<BM, BN, bf16, KB, LOOP_KB>.
#define FP8GEMM_K_BOUND_ENTRY(KEYWORD, BM, BN, KB, LOOP_KB)                  \
  namespace fp8gemm {                                                        \
  namespace detail {                                                         \
  KEYWORD KernelEntry kernel_entry<BM, BN, OutDtype::kBF16, KB, LOOP_KB>(); \
  }                                                                          \
  }
// A short-K twin (FP8GEMM_SHORT_K_TILES) and a posted loop kernel (FP8GEMM_POSTED_LOOP_TILES).
#define FP8GEMM_INSTANTIATE_SHORT_K_TILE(BM, BN, KB) FP8GEMM_K_BOUND_ENTRY(template, BM, BN, KB, 0)
#define FP8GEMM_EXTERN_SHORT_K_TILE(BM, BN, KB) FP8GEMM_K_BOUND_ENTRY(extern template, BM, BN, KB, 0)
#define FP8GEMM_INSTANTIATE_POSTED_LOOP_TILE(BM, BN, KB) FP8GEMM_K_BOUND_ENTRY(template, BM, BN, 0, KB)
#define FP8GEMM_EXTERN_POSTED_LOOP_TILE(BM, BN, KB) FP8GEMM_K_BOUND_ENTRY(extern template, BM, BN, 0, KB)

}  // namespace fp8gemm
