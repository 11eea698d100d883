// Host API of the dense block-scaled FP8 GEMM (sm_90a).
//
//   D[m, n] = sum_kb SFA[m, kb] * SFB[n / 128, kb] * (A[m, kb*128 : kb*128+128] . B[n, same])
//
// A e4m3 [M, K] and B e4m3 [N, K] both K-major ("NT"), FP32 accumulation (promoted every 128 K),
// D bf16 or f32 [M, N] row-major. Deterministic (no atomics; split-K adds its partials in a fixed order).
#pragma once
#include <cuda_runtime.h>

namespace fp8gemm {

enum class OutDtype : int { kBF16 = 0, kF32 = 1 };

struct GemmProblem {
  const void* a;      // e4m3 [M, K], row-major (K contiguous); K % 16 == 0
  const void* b;      // e4m3 [N, K], row-major
  const float* sfa;   // A scales, MN-major: (m, kb) at sfa[kb * sfa_ld + m]
  int sfa_ld;         // >= M, a multiple of 4 (or any, with a 64-row tile: see launch_fp8_gemm)
  const float* sfb;   // B scales, row-major [cdiv(N,128), cdiv(K,128)]
  void* d;            // [M, N] row-major, OutDtype
  OutDtype out_dtype;
  int m, n, k;
};

struct GemmConfig {
  int block_m;     // 64, 128 or 256 (kCompiledTiles); kGemvMaxM / kGemvMmaMaxM: a pipeline-free GEMM
  int block_n;     // one of kCompiledBlockN; kGemvRows / kGemvMmaRows with those
  int num_stages;  // pipeline depth; 0 = as many as fit in shared memory
  int num_sms;     // persistent grid size; 0 = all SMs of the current device
  int multicast;   // 1 or 2 (cluster size for TMA multicast)
  // With multicast 2, which operand the CTA pair shares: 0 = B (the pair works on neighbouring
  // M-blocks of one N-block), 1 = A (neighbouring N-blocks of one M-block; A's scales come along).
  int multicast_a = 0;
  // Dense decode tiles only (is_split_k_tile: 64 or 128 x 32 or 64): CTAs per tile, each over 1 /
  // k_splits of the k-blocks, their partial tiles added in a fixed order through distributed shared
  // memory (a cluster of k_splits, no multicast; cuda/gemm/split_k.cuh). 1 (none) or 2 .. kMaxKSplits (4).
  int k_splits = 1;
};
// The most CTAs of a split-K cluster, and the widest tile split. Up to 8 (a portable cluster) work,
// but splits of 5-8 measured slower wherever they fit (the owners' sums grow), and the 64x128 tile's
// splits (4x the partials' bytes of 64x32) tied at best (RESULTS.md, sessions 29-30). Their sums
// made the 64x64 / 64x128 kernels spill 12-52 bytes; without them nothing spills.
constexpr int kMaxKSplits = 4;
constexpr int kMaxSplitKBlockN = 64;
// The tiles that split K: one 64-row M-block (M <= 64) or one 128-row one (M = 65..128: two math
// warpgroups, B loaded once per tile instead of once per 64-row M-block), 32 or 64 columns.
__host__ __device__ constexpr bool is_split_k_tile(int block_m, int block_n) {
  return (block_m == 64 || block_m == 128) && block_n <= kMaxSplitKBlockN;
}

// The decode GEMM of M <= kGemvMaxM rows on the CUDA cores (fp8_gemv.cu): selected by the
// configuration {kGemvMaxM, kGemvRows} (its "tile": up to 4 rows of A x 8 rows of B per CTA; the
// other fields must be 0, 0, 1, 0, 1). No shared-memory pipeline, any N, K % 16 == 0.
constexpr int kGemvMaxM = 4;
constexpr int kGemvRows = 8;
inline bool is_gemv(const GemmConfig& cfg) { return cfg.block_m == kGemvMaxM && cfg.block_n == kGemvRows; }
cudaError_t launch_fp8_gemv(const GemmProblem& p, cudaStream_t stream);
// The same for M <= 8 on the tensor cores (mma.sync, fp8_gemv_mma.cu): the pseudo-tile
// {kGemvMmaMaxM, kGemvMmaRows} (16 rows of B per CTA; other fields as above; any N, K % 16 == 0).
constexpr int kGemvMmaMaxM = 8;
constexpr int kGemvMmaRows = 16;
inline bool is_gemv_mma(const GemmConfig& cfg) {
  return cfg.block_m == kGemvMmaMaxM && cfg.block_n == kGemvMmaRows;
}
cudaError_t launch_fp8_gemv_mma(const GemmProblem& p, cudaStream_t stream);

// ------------------------------------------------------------------------------------------------
// Compiled configurations (mirror this list on the Python side).
//
// Every (block_m, block_n) pair below is compiled for BOTH output dtypes (bf16, f32). The cluster
// (multicast 1 or 2, and which operand a pair shares) and num_stages (1 .. max_stages) are runtime
// parameters of every compiled kernel, so they cost no extra instantiations.
//
// Why this set (compile time is not the constraint: each tile compiles, both dtypes, in ~4-5 s on
// one core; the whole gemm library in ~90 s on one core): tiles are chosen for wave quantisation
// on 132 SMs and for the register budget (out + acc = BLOCK_N floats per thread, <= 232).
//   block_m = 128 (two math warpgroups; throughput configs, M >= ~256):
//     128  default; divides the 128-wide B-scale blocks (no straddling). N=4096: 32 N-blocks,
//          N=24576: 192, N=32768: 256 (M=4096: 8192 tiles = 62.1 waves).
//     112  straddles scale blocks; N=4096 -> 37 N-blocks (M=4096: 1184 tiles = 8.97 waves),
//          8192^3 -> 4736 tiles = 35.9 waves.
//     144  straddles; 8192^3 -> 57 N-blocks (3648 tiles = 27.6 waves).
//     160  straddles; N=7168 -> 45 N-blocks (M=4096: 1440 tiles = 10.9 waves).
//     176  straddles two or three scale blocks (tiles starting 96 or 112 columns into a block):
//          the promotion takes a third B scale. N=2112 -> 12 N-blocks (M=4096: 384 tiles = 2.91
//          waves): +4% over 128x192 at 4096x2112x7168, +10% over 256x128 at 2048x7168x7168,
//          +1-7% at K = 2048. Its eight split copies of the serial loop are unrolled twice, not four
//          times: a tile's first pass fetches its copy's code from L2 (at K = 512 it lost 20% before;
//          now it takes 1.03-1.17x the other picks' time there; gemm_config._tile_factor keeps it
//          off; RESULTS.md, session 46).
//     192  straddles (every other tile); the widest one-wave tile: 96 + 96 registers of output
//          and accumulator (serial promotion) and 22% less operand traffic per FLOP than 128x128.
//          N=2112 -> 11 N-blocks (M=4096: 352 tiles = 2.67 waves; DeepGEMM's pick there).
//     32, 64  split-K only (gemm_config.pick: M = 65..128 from K = 6144, one M-block of two 64-row
//             halves, K split 2-4 ways): B is loaded once per tile, where two 64-row M-blocks load it
//             twice (96x2112x7168 10.90 -> 10.32 us, 128x2112x16384 19.0 -> 16.7; RESULTS.md, session 34).
//   block_m = 256 (two math warpgroups, two 64-row waves each, serial promotion), block_n = 128:
//          half the B traffic per FLOP of 128x128 (L2 -> SM bandwidth is what 128-row tiles run
//          into on the H100); bf16 output (f32: compiled, not offered until measured). Runs in CTA
//          pairs sharing A from K = 1024 (+0.7-2.3%; jax_fp8gemm/gemm_config.py).
//     (A tile touches at most three 128-wide B-scale blocks: BLOCK_N <= 256 + gcd(BLOCK_N, 128).)
//   block_m = 64 (one math warpgroup: decode / small M, memory-bound on B):
//     32, 64  many N-tiles so that enough SMs stream B when M <= 64 (N=2112 -> 66 / 33 tiles,
//             N=4096 -> 128 / 64 tiles per M-block). (16 was measured: no faster at 64x2112x7168,
//             where 132 tiles fill the SMs, and slower elsewhere.) gemm_config.pick takes the
//             widest 64-row tile that leaves enough CTAs, a rule fitted to a measured sweep, and
//             splits a 64x32 / 64x64 tile's K over a cluster of 2 CTAs where twice the tiles fit
//             the SMs (GemmConfig::k_splits; 64x2112x7168 +22%, RESULTS.md session 29; the earlier
//             split-K branches of sessions 21-23 lost to their exchange and clusters that did not
//             all fit at once).
//     128     M in (64, 128]: 2 M-blocks x N/128 (pairs sharing B measured no faster: unpaired).
//     192     wide N (18432, 24576): one wave of 96-128 tiles where 64x128 needs two (+11% at
//             N = 18432, K = 7168); straddles scale blocks, so it runs all of K (no split-K) and
//             promotes serially (96 + 96 registers).
// Shared memory (max_stages, bf16 / f32 out, as the harness prints them): 128x112 6/5, 128x128 5/4,
// 128x144 5/4, 128x160 5/4, 128x176 4/3, 128x192 4/3, 256x128 3/3, 128x32 10/10, 128x64 8/7,
// 64x32 17/17, 64x64 13/12, 64x128 8/7, 64x192 6/5.
// ------------------------------------------------------------------------------------------------
struct CompiledTile {
  int block_m, block_n;
};
inline constexpr CompiledTile kCompiledTiles[] = {
    {128, 112}, {128, 128}, {128, 144}, {128, 160}, {128, 176}, {128, 192}, {256, 128}, {128, 32}, {128, 64},
    {64, 32},   {64, 64},   {64, 128},  {64, 192},
};
inline constexpr int kCompiledBlockN[] = {32, 64, 112, 128, 144, 160, 176, 192};
inline constexpr int kNumCompiledTiles = static_cast<int>(sizeof(kCompiledTiles) / sizeof(kCompiledTiles[0]));

// True iff (cfg.block_m, cfg.block_n) is compiled for `out`, multicast is 1 or 2 and num_stages /
// num_sms are not negative. (Whether num_stages fits the device is checked at launch.)
bool is_compiled(const GemmConfig& cfg, OutDtype out);

// Largest number of pipeline stages whose shared memory fits 227 KB (232448 bytes, the sm90
// per-block opt-in maximum); 0 if the tile is not compiled. Shared memory needed by a config:
//   smem(stages) = epilogue(block_m * block_n * sizeof(out), rounded up to 1 KB)
//                + stages * (block_m * 128 + block_n * 128 + round_up(sfa_rows * 4, 128) + 16)
//   with sfa_rows = block_m + 4 (block_m 256: 256)
int max_stages(int block_m, int block_n, OutDtype out);

// How many clusters of `cluster_size` CTAs of the dense block_m x block_n kernel (bf16 out, one CTA
// per SM) the current device holds at once: a split-K grid larger than that runs in two rounds. Not
// every GPC holds a whole number of clusters (an H200's 132 SMs: 66 of 2, 39 of 3, 30 of 4, 15 of
// 8). 0 past kMaxKSplits, for a tile without split-K, or if the query fails.
int max_active_split_k_clusters(int block_m, int block_n, int cluster_size);

// Launches on `stream`. No allocation, no host synchronisation, no stream queries (this is called
// inside CUDA-graph capture). Encodes TMA descriptors on the host per call and passes them as
// __grid_constant__ parameters. Sets the kernel's max dynamic smem attribute once per (kernel, device).
// Returns cudaErrorInvalidValue for unsupported shapes/configs; otherwise the launch error.
// m == 0 or n == 0: nothing to do, returns cudaSuccess without launching. k must be > 0.
cudaError_t launch_fp8_gemm(const GemmProblem& p, const GemmConfig& cfg, cudaStream_t stream);

// ------------------------------------------------------------------------------------------------
// Grouped GEMMs (mixture of experts). B is [G, N, K] (group g's [N, K] at rows g*N of a [G*N, K]
// tensor), SFB [G, cdiv(N,128), cdiv(K,128)]. Group sizes live on the device and are read by the
// kernels only (no host synchronisation; CUDA-graph friendly).
//
//   contiguous (masked = false): A [M, K] rows sorted by group, D [M, N]; group g owns the next
//       group_sizes[g] rows (jax.lax.ragged_dot semantics; negative sizes count as 0, sizes running
//       past M are cut at M). No padding or alignment of groups. D rows past the sum are zero.
//       SFA MN-major [cdiv(K,128)][sfa_ld], sfa_ld >= M, multiple of 4.
//   masked (masked = true): A [G, Mmax, K] (as [G*Mmax, K]), D [G, Mmax, N]; masked_m =
//       group_sizes[g] clamped to [0, Mmax]; D rows >= masked_m[g] of group g are zero.
//       SFA MN-major [cdiv(K,128)][sfa_ld], sfa_ld >= G*Mmax, multiple of 4.
//
// A launch is one kernel on `stream`: the persistent GEMM, whose producer warpgroup's idle warps
// also zero the D rows no tile writes (reading the sizes on the device; the rows are disjoint from
// the tiles').
// ------------------------------------------------------------------------------------------------
struct GroupedGemmProblem {
  const void* a;           // e4m3, see above; K % 16 == 0
  const void* b;           // e4m3 [G*N, K]
  const float* sfa;        // A scales, MN-major: (row, kb) at sfa[kb * sfa_ld + row]
  int sfa_ld;
  const float* sfb;        // [G][cdiv(N,128)][cdiv(K,128)]
  void* d;                 // D, OutDtype, row-major with N columns
  OutDtype out_dtype;
  int m;                   // contiguous: total rows M; masked: Mmax (rows per group)
  int n, k, num_groups;
  const int* group_sizes;  // device int32 [G]: contiguous group sizes, or masked_m
  bool masked;             // false: contiguous layout, true: masked layout
  // Optional device int32 workspace, read by the contiguous layout's 256-row tile (the launch sets
  // it to 0 first, on `stream`): with it the CTAs take their tiles in order as they become free,
  // instead of tile t on CTA t % grid. That keeps the tiles in flight consecutive when tiles cost
  // unequal time (the partial tiles run one 64-row wave per warpgroup), so the groups' B stays
  // L2-resident while it is reused. Null (and the other tiles, the masked layout): the static order.
  int* tile_counter = nullptr;
};

// Tiles compiled for the grouped kernels (both output dtypes each; multicast must be 1):
//   256x128  large groups, bf16 output: the dense kernel's two-wave tile (+11% over 128x128 on the
//            large dense shapes); a group's last partial tile wastes up to 255 rows.
//   128x128  the throughput tile (as for dense: divides the 128-wide B-scale blocks, so N = 4096 /
//            7168 have no ragged N-tile; 2 math warpgroups).
//   64x128   small groups (rows per group <= ~96, decode-style masked layouts with a small Mmax):
//            unpadded groups cost up to one partial M-tile each, which is half as large here.
// The tile count is data dependent (it depends on the group sizes), so the N-tile widths that the
// dense kernel uses against wave quantisation (112, 144, 160) buy little here and are not compiled:
// 6 kernels in 3 translation units.
inline constexpr CompiledTile kCompiledGroupedTiles[] = {{256, 128}, {128, 128}, {64, 128}};
inline constexpr int kNumCompiledGroupedTiles =
    static_cast<int>(sizeof(kCompiledGroupedTiles) / sizeof(kCompiledGroupedTiles[0]));

// True iff (cfg.block_m, cfg.block_n) is compiled for grouped GEMMs and `out`, multicast == 1 and
// num_stages / num_sms are not negative.
bool is_compiled_grouped(const GemmConfig& cfg, OutDtype out);

// Same contract as launch_fp8_gemm (no allocation, no host synchronisation, no stream queries, TMA
// descriptors encoded per call, cudaErrorInvalidValue for unsupported shapes/configs: also
// multicast != 1, G*N or G*Mmax past INT32). m == 0 or n == 0 (or masked with G == 0): nothing to
// do. num_groups == 0 in the contiguous layout: D is all zero (group_sizes may then be null).
cudaError_t launch_fp8_grouped_gemm(const GroupedGemmProblem& p, const GemmConfig& cfg, cudaStream_t stream);

// ------------------------------------------------------------------------------------------------
// Weight-gradient GEMMs (wgrad): both operands quantized 1x128 along the contracted token axis T.
//
//   dense:      D[m, n] = sum_tb SFA[m, tb] * SFB[n, tb] * (A[m, tb*128 : +128] . B[n, same])
//   k-grouped:  D[g, m, n] = the same sum over the tokens of group g only (G consecutive token
//               ranges of any length; see GroupedWgradGemmProblem).
//
// A e4m3 [M, T], B e4m3 [N, T], both K(=T)-major; D [M, N] (k-grouped: [G, M, N]) row-major, FP32
// or bf16 (rounded once from the FP32 accumulator: what a separate convert of the FP32 result gives).
// Both scales are per row and 128-token block, MN-major: (m, tb) at sfa[tb * sfa_ld + m], (n, tb) at
// sfb[tb * sfb_ld + n], tb < cdiv(T, 128). Deterministic (no atomics, no split-K).
// ------------------------------------------------------------------------------------------------
struct WgradGemmProblem {
  const void* a;     // e4m3 [M, T], row-major (T contiguous); T % 16 == 0
  const void* b;     // e4m3 [N, T], row-major
  const float* sfa;  // A scales, MN-major [cdiv(T,128)][sfa_ld], sfa_ld >= M, multiple of 4
  int sfa_ld;
  const float* sfb;  // B scales, MN-major [cdiv(T,128)][sfb_ld], sfb_ld >= N, multiple of 4
  int sfb_ld;
  void* d;           // [M, N] row-major, out_dtype; a row is a multiple of 16 bytes (TMA store
                     // pitch): N % 4 == 0 for f32, N % 8 == 0 for bf16
  int m, n, t;
  OutDtype out_dtype = OutDtype::kF32;
  // The 256x96 tile only (its scale products on the tensor cores), made from the scales by the
  // caller (the other tiles ignore them); each scale s split into bf16s hi = bf16(s), lo = bf16(s - hi):
  //   sfa_ops: A's scale operand, uint32 [cdiv(T,128)][sfa_ld] (the layout of sfa): the word
  //            hi | lo << 16 of each of A's scales (read in place of sfa);
  //   sfb_ops: B's scale operand, bf16 [cdiv(T,128)][N][8] = (hi, hi, lo, lo, 0, 0, 0, 0) of each
  //            of B's scales. Both 16-byte aligned.
  const void* sfa_ops = nullptr;
  const void* sfb_ops = nullptr;
};

// k-grouped: group g owns the tokens [off_g, off_g + group_sizes[g]), off_g = sum_{h<g} sizes[h]:
// any sizes, unpadded (device int32 [G], read by the kernel only: no host synchronisation);
// negative sizes count as 0 and tokens past T are cut (jax.lax.ragged_dot's rule). A 128-token
// scale block shared by two groups contributes to each only its own tokens, with the block's
// scales. D [G, M, N]: out[g] = A[:, tokens of g] @ B[:, tokens of g]^T; an empty group's out[g] is
// written as zeros (every element of D is written).
struct GroupedWgradGemmProblem {
  const void* a;     // e4m3 [M, T]
  const void* b;     // e4m3 [N, T]
  const float* sfa;  // MN-major [cdiv(T,128)][sfa_ld]
  int sfa_ld;
  const float* sfb;  // MN-major [cdiv(T,128)][sfb_ld]
  int sfb_ld;
  void* d;           // [G, M, N], out_dtype (row pitch as for dense)
  int m, n, t, num_groups;
  const int* group_sizes;  // device int32 [G]
  OutDtype out_dtype = OutDtype::kF32;
  const void* sfa_ops = nullptr;  // the 256x96 tile only: as WgradGemmProblem::sfa_ops / sfb_ops
  const void* sfb_ops = nullptr;
};

// Tiles compiled for the wgrad kernels (dense and k-grouped each, f32 and bf16 output; both also
// run in CTA pairs sharing A, the dense one sharing B too):
//   256x128  two 64-row waves per math warpgroup (serial promotion), as the forward 256x128: half
//            the B traffic per FLOP of 128x128; D is staged one 128-row wave at a time (64 KB).
//   256x96   the scale products on the tensor cores (GemmTraits::kScaleMma; B's scale operand
//            from sfb_ops, 16 bytes per column and k-block in place of B's scales, and A's from
//            sfa_ops in place of A's): dense 9-10% faster than 256x128 at 7168^2-8192^2,
//            k-grouped 5-8% (a shared block keeps its scales: the same operands).
//   128x128  deferred promotion (k-grouped: with a 28-byte spill per tile, see
//            GemmTraits::kExtraRegisters). M = N = 7168: 56 x 56 tiles.
//   128x112  N = 7168 -> 64 N-blocks, deferred promotion in both variants (3 * 56 + 40 registers).
//   64x128   small M (one math warpgroup; k-grouped: the serial loop).
// Shared memory per stage adds 2 x BLOCK_N * 4 bytes of SFB (256x96 dense: 2 x (BLOCK_N * 16 + 16)
// of B's scale operand); f32 staging of D takes min(BLOCK_M, 128) * BLOCK_N * 4.
inline constexpr CompiledTile kCompiledWgradTiles[] = {{256, 128}, {256, 96}, {128, 128}, {128, 112}, {64, 128}};
inline constexpr int kNumCompiledWgradTiles =
    static_cast<int>(sizeof(kCompiledWgradTiles) / sizeof(kCompiledWgradTiles[0]));

// True iff (cfg.block_m, cfg.block_n) is a compiled wgrad tile, num_stages / num_sms are not
// negative and the cluster is valid: pairs (multicast 2) sharing A or B for the dense kernel,
// sharing A for the k-grouped one (which then also needs an even number of N-blocks).
bool is_compiled_wgrad(const GemmConfig& cfg, bool k_grouped);

// Largest number of pipeline stages of a wgrad tile (dense) that fits 227 KB; 0 if not compiled.
int max_stages_wgrad(int block_m, int block_n, OutDtype out);

// Same contract as launch_fp8_gemm: no allocation, no host synchronisation, no stream queries, TMA
// descriptors encoded per call; cudaErrorInvalidValue for unsupported shapes/configs (t <= 0,
// t % 16, a D row not a multiple of 16 bytes, bad alignment, num_stages < 2; k-grouped in CTA
// pairs: sharing B, or an odd number of N-blocks).
// m == 0 or n == 0: nothing to do.
cudaError_t launch_fp8_gemm_wgrad(const WgradGemmProblem& p, const GemmConfig& cfg, cudaStream_t stream);

// One persistent kernel (KGroupedWgradScheduler: (group, m-block, n-block) tiles, each with its
// group's k-block range). G == 0, m == 0 or n == 0: nothing to do (D is empty).
// Also cudaErrorInvalidValue when G * M or the tile count exceeds int32.
cudaError_t launch_fp8_grouped_gemm_wgrad(const GroupedWgradGemmProblem& p, const GemmConfig& cfg,
                                          cudaStream_t stream);

}  // namespace fp8gemm
