// The decode GEMM for M <= kGemvMaxM (batch-1 .. 4 token generation) on the CUDA cores:
//
//   D[m, n] = sum_kb SFA[m, kb] * SFB[n / 128, kb] * (A[m, kb*128 : kb*128+128] . B[n, same])
//
// Why not the wgmma kernel: with M <= 4 a GEMM is a matrix-vector product that streams B once.
// The 64-row tiles take ~150 ns per k-block per CTA, however few their rows (RESULTS.md, sessions
// 22-28), so their clusters run 14-28 k-blocks one after another and move 1-2 TB/s (1x2112x7168:
// ~9 us for 15 MB). Here each CTA issues all of its loads at once: 8 rows of B (one 128-row scale
// block) x all of K, split over 8 warps in 512-byte steps (a lane's 16 bytes lie inside one
// k-block), up to two CTAs per SM. The math is M FFMAs per element of B (plus its conversion),
// a small part of the issue slots.
//
// Deterministic: each lane adds its steps in order, a warp's lanes by a fixed butterfly, the warps
// in order. The FP32 sums differ from the wgmma kernel's in rounding only.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "gemm/fp8_gemm.h"
#include "gemm/gemv_common.cuh"

namespace fp8gemm {
namespace {

constexpr int kWarps = 8;                  // per CTA: K split over the warps
constexpr int kRows = kGemvRows;           // rows of B (columns of D) per CTA; 128 % kRows == 0
constexpr int kSegBytes = 16;  // a lane's load: 16 e4m3 of one row, inside one k-block; a warp's
                               // step along K is 32 of them (512 bytes, 4 k-blocks)

// 8 e4m3 (two 32-bit words) to floats: e4m3 -> f16 is exact, f16 -> f32 too.
__device__ __forceinline__ void e4m3x8_to_f32(uint32_t lo, uint32_t hi, float (&f)[8]) {
  const uint32_t w[2] = {lo, hi};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] >> (16 * j)), __NV_E4M3);
      const float2 v = __half22float2(__half2(h));
      f[4 * i + 2 * j] = v.x, f[4 * i + 2 * j + 1] = v.y;
    }
  }
}

// Two CTAs per SM (128 registers) up to M = 2; M = 3-4 needs more registers than that (it spilled),
// so one.
template <int kM, class OutT>
__global__ void __launch_bounds__(kWarps * 32, kM <= 2 ? 2 : 1)
    fp8_gemv_kernel(const uint8_t* __restrict__ a, const float* __restrict__ sfa, int sfa_ld,
                    const uint8_t* __restrict__ b, const float* __restrict__ sfb, OutT* __restrict__ d, int m,
                    int n, int k) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int row0 = static_cast<int>(blockIdx.x) * kRows;
  const int num_kb = (k + 127) / 128;
  const int segs = k / kSegBytes;  // K % 16 == 0 (the launcher checks)
  const float* const sfb_block = sfb + static_cast<long long>(row0 / 128) * num_kb;  // one scale block
  // Rows past N are loaded as row N - 1 (never stored): every lane runs the same loop. The CTA's
  // rows are consecutive, so one base and an offset each (no pointer per row: registers).
  const uint8_t* const b_base = b + static_cast<long long>(row0) * k;
  const int last_row = n - 1 - row0;

  float acc[kRows][kM];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < kM; ++i) acc[r][i] = 0.f;

  for (int seg = warp * 32 + lane; seg < segs; seg += kWarps * 32) {
    const int kb = seg / (128 / kSegBytes);
    // B's 16 bytes of each row first: the loads that go to DRAM (streamed, not kept in L1).
    uint4 bv[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      bv[r] = __ldcs(reinterpret_cast<const uint4*>(b_base + min(r, last_row) * k + seg * kSegBytes));
    const float sb = __ldg(sfb_block + kb);
    uint4 av[kM];
    float s[kM];
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      const int row = min(i, m - 1);  // rows past M: computed, never stored
      av[i] = __ldg(reinterpret_cast<const uint4*>(a + static_cast<long long>(row) * k + seg * kSegBytes));
      s[i] = __ldg(sfa + static_cast<long long>(kb) * sfa_ld + row) * sb;
    }
    // Half a segment at a time (8 elements), A pre-scaled by its k-block's scale product:
    // acc += (s a) . b keeps one accumulator per (row, m).
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float af[kM][8];
#pragma unroll
      for (int i = 0; i < kM; ++i) {
        const uint32_t lo = half ? av[i].z : av[i].x, hi = half ? av[i].w : av[i].y;
        e4m3x8_to_f32(lo, hi, af[i]);
#pragma unroll
        for (int e = 0; e < 8; ++e) af[i][e] *= s[i];
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float bf[8];
        e4m3x8_to_f32(half ? bv[r].z : bv[r].x, half ? bv[r].w : bv[r].y, bf);
#pragma unroll
        for (int i = 0; i < kM; ++i)
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r][i] = fmaf(af[i][e], bf[e], acc[r][i]);
      }
    }
  }

  // The warp's lanes by a butterfly (every lane ends with the sum), then the warps in order.
  __shared__ float partial[kWarps][kRows][kM];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      float v = acc[r][i];
#pragma unroll
      for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0) partial[warp][r][i] = v;
    }
  __syncthreads();
  const int t = static_cast<int>(threadIdx.x);
  if (t < kRows * kM) {
    const int r = t / kM, i = t % kM, col = row0 + r;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += partial[w][r][i];
    if (col < n && i < m) gemv::store(d, static_cast<long long>(i) * n + col, sum);
  }
}

template <int kM>
cudaError_t launch_rows(const GemmProblem& p, cudaStream_t stream) {
  const dim3 grid((p.n + kRows - 1) / kRows), block(kWarps * 32);
  return gemv::on_out_dtype(p, [&](auto* d) {
    fp8_gemv_kernel<kM, std::remove_pointer_t<decltype(d)>><<<grid, block, 0, stream>>>(
        static_cast<const uint8_t*>(p.a), p.sfa, p.sfa_ld, static_cast<const uint8_t*>(p.b), p.sfb, d, p.m, p.n, p.k);
  });
}

}  // namespace

cudaError_t launch_fp8_gemv(const GemmProblem& p, cudaStream_t stream) {
  // The kernel's offsets within its 8 rows of B are 32-bit ints (r * K).
  const cudaError_t err = gemv::check_problem(p, kGemvMaxM, INT_MAX / kRows);
  if (err != cudaSuccess || p.m == 0 || p.n == 0) return err;
  switch (p.m) {
    case 1: return launch_rows<1>(p, stream);
    case 2: return launch_rows<2>(p, stream);
    default: return launch_rows<kGemvMaxM>(p, stream);
  }
}

}  // namespace fp8gemm
