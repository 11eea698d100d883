// The decode GEMM for M <= kGemvMmaMaxM (8) rows on the tensor cores, without a pipeline:
//
//   D[m, n] = sum_kb SFA[m, kb] * SFB[n / 128, kb] * (A[m, kb*128 : kb*128+128] . B[n, same])
//
// As fp8_gemv.cu, each CTA takes a few rows of B and all of K, split over its warps; but the
// products run on mma.sync.m16n8k32 (e4m3 x e4m3 -> f32): 16 rows of B as the mma's A operand, the
// <= 8 rows of A (the tokens) as its 8 columns. No conversions, so M = 2-8 cost what M = 1 does.
// A CTA has 1, 2, 4 or 8 warps, enough for each to load all its k-blocks in one step of
// kKbInFlight where K allows (launch_fp8_gemv_mma), and every load of a step precedes its mmas.
//
// Operand layout without shuffles: an mma over 32 values of k gives the same dot products however k
// is ordered, as long as both operands order it alike. Lane (g, t) = (lane / 4, lane % 4) holds,
// for the mma's A operand, 4 bytes of rows g and g + 8 at k in [4t, 4t + 4) and [4t + 16, 4t + 20),
// and for its B operand the same k of column g. Reading those 8 logical k as 8 contiguous bytes,
// lane (g, t) loads 16 bytes at 16t of a 64-byte chunk of B's rows g and g + 8 and of A's row g,
// and feeds bytes 0-7 to one mma and 8-15 to the next: two mmas per 64 bytes of K.
// Accumulator: lane (g, t) holds D^T rows g and g + 8 (columns of D) x columns 2t, 2t + 1 (rows of
// D). Each k-block's 4 mmas go into a fresh accumulator, promoted with sa[token] x sb[row block].
//
// Deterministic: the warps add their k-blocks in order, then the warps' partials are added in order.
#include <cuda_bf16.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "gemm/fp8_gemm.h"
#include "gemm/gemv_common.cuh"

namespace fp8gemm {
namespace {

constexpr int kWarps = 8;             // at most, per CTA: K (in k-blocks) split over the warps
constexpr int kRows = kGemvMmaRows;   // 16 rows of B per CTA: the mma's M; 128 % 16 == 0
constexpr int kChunkBytes = 64;       // 4 lanes x 16 bytes: two mmas' worth of K
constexpr int kKbInFlight = 4;        // k-blocks per warp loaded at once: 96 registers of B and A

__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int kCtaWarps, class OutT>
__global__ void __launch_bounds__(kCtaWarps * 32)
    fp8_gemv_mma_kernel(const uint8_t* __restrict__ a, const float* __restrict__ sfa, int sfa_ld,
                        const uint8_t* __restrict__ b, const float* __restrict__ sfb, OutT* __restrict__ d,
                        int m, int n, int k) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int row0 = static_cast<int>(blockIdx.x) * kRows;
  const int num_kb = (k + 127) / 128;
  const float* const sfb_block = sfb + static_cast<long long>(row0 / 128) * num_kb;
  // Rows past N load row N - 1 and tokens past M load token M - 1: computed, never stored.
  const uint8_t* const b_lo = b + static_cast<long long>(min(row0 + g, n - 1)) * k;
  const uint8_t* const b_hi = b + static_cast<long long>(min(row0 + g + 8, n - 1)) * k;
  const uint8_t* const a_row = a + static_cast<long long>(min(g, m - 1)) * k;
  const int col0 = min(2 * t, m - 1), col1 = min(2 * t + 1, m - 1);  // this lane's tokens (D rows)

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  // kKbInFlight of this warp's k-blocks (kb, kb + kCtaWarps, ...) are loaded before any is used, so
  // each SM keeps ~100 KB of B in flight: one CTA per SM at N = 2112 must cover DRAM latency alone.
  // (kCtaWarps a constant: the k-blocks' addresses are one register plus immediate offsets.)
  for (int kb0 = warp; kb0 < num_kb; kb0 += kCtaWarps * kKbInFlight) {
    uint4 lo[kKbInFlight][2], hi[kKbInFlight][2], tok[kKbInFlight][2];
    float s0[kKbInFlight], s1[kKbInFlight];
#pragma unroll
    for (int i = 0; i < kKbInFlight; ++i) {
      const int kb = kb0 + i * kCtaWarps;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int off = kb * 128 + c * kChunkBytes + 16 * t;
        const bool in = off < k;  // K % 16 == 0: a 16-byte load is all in or all out
        const uint4 zero = make_uint4(0, 0, 0, 0);
        lo[i][c] = in ? __ldcs(reinterpret_cast<const uint4*>(b_lo + off)) : zero;
        hi[i][c] = in ? __ldcs(reinterpret_cast<const uint4*>(b_hi + off)) : zero;
        tok[i][c] = in ? __ldg(reinterpret_cast<const uint4*>(a_row + off)) : zero;
      }
      const int kb_in = min(kb, num_kb - 1);  // a k-block past K is all zeros: any scale will do
      const float sb = __ldg(sfb_block + kb_in);
      s0[i] = __ldg(sfa + static_cast<long long>(kb_in) * sfa_ld + col0) * sb;
      s1[i] = __ldg(sfa + static_cast<long long>(kb_in) * sfa_ld + col1) * sb;
    }
#pragma unroll
    for (int i = 0; i < kKbInFlight; ++i) {
      float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        mma_e4m3(part, lo[i][c].x, hi[i][c].x, lo[i][c].y, hi[i][c].y, tok[i][c].x, tok[i][c].y);
        mma_e4m3(part, lo[i][c].z, hi[i][c].z, lo[i][c].w, hi[i][c].w, tok[i][c].z, tok[i][c].w);
      }
      if (kb0 + i * kCtaWarps >= num_kb) break;  // warp-uniform; keeps a non-finite scale out
      // part: (row g, token 2t), (row g, token 2t + 1), (row g + 8, token 2t), (row g + 8, token 2t + 1)
      acc[0] = fmaf(part[0], s0[i], acc[0]);
      acc[1] = fmaf(part[1], s1[i], acc[1]);
      acc[2] = fmaf(part[2], s0[i], acc[2]);
      acc[3] = fmaf(part[3], s1[i], acc[3]);
    }
  }

  // The warps' partials, added in warp order by warp 0's lanes (every warp holds the same layout).
  __shared__ float partial[kCtaWarps][32][4];
#pragma unroll
  for (int j = 0; j < 4; ++j) partial[warp][lane][j] = acc[j];
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < kCtaWarps; ++w) sum += partial[w][lane][j];
      const int row = row0 + g + (j >= 2 ? 8 : 0), token = 2 * t + (j & 1);
      if (row < n && token < m) gemv::store(d, static_cast<long long>(token) * n + row, sum);
    }
  }
}

template <int kCtaWarps>
cudaError_t launch_with_warps(const GemmProblem& p, cudaStream_t stream) {
  const dim3 grid((p.n + kRows - 1) / kRows), block(kCtaWarps * 32);
  return gemv::on_out_dtype(p, [&](auto* d) {
    fp8_gemv_mma_kernel<kCtaWarps, std::remove_pointer_t<decltype(d)>><<<grid, block, 0, stream>>>(
        static_cast<const uint8_t*>(p.a), p.sfa, p.sfa_ld, static_cast<const uint8_t*>(p.b), p.sfb, d, p.m, p.n, p.k);
  });
}

}  // namespace

cudaError_t launch_fp8_gemv_mma(const GemmProblem& p, cudaStream_t stream) {
  // Byte offsets in 32 bits, also those of the k-blocks past K that a warp's last step skips.
  const cudaError_t err = gemv::check_problem(p, kGemvMmaMaxM, INT_MAX - (kKbInFlight * kWarps + 1) * 128);
  if (err != cudaSuccess || p.m == 0 || p.n == 0) return err;
  // Warps enough for each to load its k-blocks in one step (K = 2048: 4 warps of 4 k-blocks), up to
  // kWarps: short K gets small CTAs, several per SM, rather than idle warps.
  const int num_kb = (p.k + 127) / 128;
  const int steps_of_one_warp = (num_kb + kKbInFlight - 1) / kKbInFlight;
  const int warps = steps_of_one_warp > 4 ? 8 : steps_of_one_warp > 2 ? 4 : steps_of_one_warp;
  switch (warps) {
    case 1: return launch_with_warps<1>(p, stream);
    case 2: return launch_with_warps<2>(p, stream);
    case 4: return launch_with_warps<4>(p, stream);
    default: return launch_with_warps<kWarps>(p, stream);
  }
}

}  // namespace fp8gemm
