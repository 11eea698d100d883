// Host API of the dense block-scaled FP8 GEMM (sm_90a).
//
//   D[m, n] = sum_kb SFA[m, kb] * SFB[n / 128, kb] * (A[m, kb*128 : kb*128+128] . B[n, same])
//
// A e4m3 [M, K] and B e4m3 [N, K] both K-major ("NT"), FP32 accumulation (promoted every 128 K),
// D bf16 or f32 [M, N] row-major. Deterministic (no atomics, no split-K).
#pragma once
#include <cuda_runtime.h>

namespace fp8gemm {

enum class OutDtype : int { kBF16 = 0, kF32 = 1 };

struct GemmProblem {
  const void* a;      // e4m3 [M, K], row-major (K contiguous); K % 16 == 0
  const void* b;      // e4m3 [N, K], row-major
  const float* sfa;   // A scales, MN-major: (m, kb) at sfa[kb * sfa_ld + m]
  int sfa_ld;         // >= M, multiple of 4
  const float* sfb;   // B scales, row-major [cdiv(N,128), cdiv(K,128)]
  void* d;            // [M, N] row-major, OutDtype
  OutDtype out_dtype;
  int m, n, k;
};

struct GemmConfig {
  int block_m;     // 64 or 128
  int block_n;     // one of kCompiledBlockN
  int num_stages;  // pipeline depth; 0 = as many as fit in shared memory
  int num_sms;     // persistent grid size; 0 = all SMs of the current device
  int multicast;   // 1 or 2 (cluster size for TMA multicast)
};

// ------------------------------------------------------------------------------------------------
// Compiled configurations (mirror this list on the Python side).
//
// Every (block_m, block_n) pair below is compiled for BOTH output dtypes (bf16, f32). multicast
// (1 or 2) and num_stages (1 .. max_stages) are runtime parameters of every compiled kernel, so they
// cost no extra instantiations.
//
// Why this set (compile time is not the constraint: each tile compiles, both dtypes, in ~2.5 s on
// one core; the whole gemm library in ~25 s on one core): tiles are chosen for wave quantisation
// on 132 SMs and for the register budget (out + acc = BLOCK_N floats per thread, <= 232).
//   block_m = 128 (two math warpgroups; throughput configs, M >= ~256):
//     128  default; divides the 128-wide B-scale blocks (no straddling). N=4096: 32 N-blocks,
//          N=24576: 192, N=32768: 256 (M=4096: 8192 tiles = 62.1 waves).
//     112  straddles scale blocks; N=4096 -> 37 N-blocks (M=4096: 1184 tiles = 8.97 waves),
//          8192^3 -> 4736 tiles = 35.9 waves.
//     144  straddles; 8192^3 -> 57 N-blocks (3648 tiles = 27.6 waves).
//     160  straddles; N=7168 -> 45 N-blocks (M=4096: 1440 tiles = 10.9 waves).
//     (A tile may touch at most two 128-wide B-scale blocks: BLOCK_N <= 128 + gcd(BLOCK_N, 128);
//      so 176 or 208 are impossible, 192 would be the next candidate.)
//   block_m = 64 (one math warpgroup: decode / small M, memory-bound on B):
//     32, 64  many N-tiles so that enough SMs stream B when M <= 64 (N=2112 -> 66 / 33 tiles,
//             N=4096 -> 128 / 64 tiles per M-block);
//     128     M in (64, 128]: 2 M-blocks x N/128, with multicast=2 sharing each B tile load.
// Shared memory (max_stages, bf16 / f32 out): 128x112 6/5, 128x128 5/5, 128x144 5/4, 128x160 5/4,
// 64x32 18/17, 64x64 13/12, 64x128 8/8.
// ------------------------------------------------------------------------------------------------
struct CompiledTile {
  int block_m, block_n;
};
inline constexpr CompiledTile kCompiledTiles[] = {
    {128, 112}, {128, 128}, {128, 144}, {128, 160}, {64, 32}, {64, 64}, {64, 128},
};
inline constexpr int kCompiledBlockN[] = {32, 64, 112, 128, 144, 160};
inline constexpr int kNumCompiledTiles = static_cast<int>(sizeof(kCompiledTiles) / sizeof(kCompiledTiles[0]));

// True iff (cfg.block_m, cfg.block_n) is compiled for `out`, multicast is 1 or 2 and num_stages /
// num_sms are not negative. (Whether num_stages fits the device is checked at launch.)
bool is_compiled(const GemmConfig& cfg, OutDtype out);

// Largest number of pipeline stages whose shared memory fits 227 KB (232448 bytes, the sm90
// per-block opt-in maximum); 0 if the tile is not compiled. Shared memory needed by a config:
//   smem(stages) = epilogue(block_m * block_n * sizeof(out), rounded up to 1 KB)
//                + stages * (block_m * 128 + block_n * 128 + round_up(block_m * 4, 128) + 16)
int max_stages(int block_m, int block_n, OutDtype out);

// Launches on `stream`. No allocation, no host synchronisation, no stream queries (this is called
// inside CUDA-graph capture). Encodes TMA descriptors on the host per call and passes them as
// __grid_constant__ parameters. Sets the kernel's max dynamic smem attribute once per (kernel, device).
// Returns cudaErrorInvalidValue for unsupported shapes/configs; otherwise the launch error.
// m == 0 or n == 0: nothing to do, returns cudaSuccess without launching. k must be > 0.
cudaError_t launch_fp8_gemm(const GemmProblem& p, const GemmConfig& cfg, cudaStream_t stream);

}  // namespace fp8gemm
