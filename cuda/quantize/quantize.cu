// Quantization kernels: 1x128 row-wise groups and 128x128 blocks, FP32 scales, e4m3 values.
// Memory-bound: 16-byte loads where the row stride allows, one pass over the input, the group's
// amax reduced with warp shuffles (row-wise) or through shared memory (blockwise).
#include "quantize/quantize.h"

#include "quantize/quantize_math.cuh"

namespace fp8gemm {
namespace {

using namespace quant;

// One half warp per 1x128 group: 16 threads x 8 elements. A tile of 256 threads' work is
// kTileRows rows x kTileGroups groups (8 x 2): a warp reads 512 contiguous bytes of bf16 of one
// row, and the MN-major scales of a group column are stored 8 rows (32 bytes, a whole sector) at a
// time. A CTA takes kTilesPerCta tiles, gridDim.x apart, and issues the loads of both before it
// reduces and stores either: on the H200, bf16 in, 16% faster than one tile per CTA (3530-3900
// against 3040-3340 GB/s, 0.84-0.92x of a device copy); four tiles per CTA ran 3150-3520, eight
// 2380-2640 (RESULTS.md, session 27).
// kPadded: q's rows are k_out > k long, columns k .. k_out - 1 (within the last group) written as
// zeros, the padding a GEMM's K may need, without a copy of x (quantize.h). A variant of its own:
// the extra address math, in the kernel that does not pad, cost 7-10% (RESULTS.md, session 57).
constexpr int kTileGroups = 2;
constexpr int kTileRows = 8;
constexpr int kTilesPerCta = 2;
// CTAs per SM on the aligned path: 8 for 16-bit inputs (32 registers), 6 for f32 (40), which the
// padded variant would otherwise lose (7 and 5).
template <typename T, bool kAligned>
constexpr int rowwise_ctas_per_sm() { return kAligned ? (sizeof(T) == 2 ? 8 : 6) : 1; }

template <typename T, bool kAligned, bool kPadded>
__global__ void __launch_bounds__(kTileRows * kTileGroups * kThreadsPerGroup,
                                  rowwise_ctas_per_sm<T, kAligned>())
    quantize_rowwise_kernel(const T* __restrict__ x, int64_t rows, int64_t k, int64_t k_out_arg, bool pow2,
                            uint8_t* __restrict__ q, float* __restrict__ s) {
  const int64_t k_out = kPadded ? k_out_arg : k;
  const int64_t k_groups = (k + kGroup - 1) / kGroup;
  const int64_t col_tiles = (k_groups + kTileGroups - 1) / kTileGroups;
  const int64_t num_tiles = (rows + kTileRows - 1) / kTileRows * col_tiles;
  const int half_warp = static_cast<int>(threadIdx.x) / kThreadsPerGroup;
  const int lane_in_group = threadIdx.x % kThreadsPerGroup;

  // This thread's chunk of tile u: the group (row, kb) and the first column (kPadded: k_out where
  // the half warp has no group in this tile, past the last row or group); valid[u]: its elements in
  // x. kPadded: the elements of q it writes, the valid ones and the zero padding, are
  // chunk_valid(col, k_out).
  struct Chunk {
    int64_t row, kb, col;
  };
  Chunk c[kTilesPerCta];
  int valid[kTilesPerCta];
#pragma unroll
  for (int u = 0; u < kTilesPerCta; ++u) {
    // 32-bit division (the launch keeps the grid below 2^31, so tile < 2^32): a 64-bit one is a
    // slow path of its own, which delayed the loads behind it (2.5%, RESULTS.md session 59).
    const uint32_t tile = blockIdx.x + uint32_t(u) * gridDim.x, band = tile / uint32_t(col_tiles);
    const int64_t tile_row = int64_t(band) * kTileRows + half_warp / kTileGroups;
    const int64_t tile_kb = int64_t(tile - band * uint32_t(col_tiles)) * kTileGroups + half_warp % kTileGroups;
    const bool active = tile < num_tiles && tile_row < rows && tile_kb < k_groups;
    c[u].row = active ? tile_row : 0, c[u].kb = active ? tile_kb : 0;
    c[u].col = active || !kPadded ? c[u].kb * kGroup + lane_in_group * kVec : k_out;
    valid[u] = active ? chunk_valid(c[u].col, k) : 0;
  }
  // Every tile's chunk is loaded before any is used.
  uint4 raw[kTilesPerCta][kRawWords<T>];
  load_chunks<T, kAligned, kTilesPerCta>([&](int u) { return x + c[u].row * k + c[u].col; },
                                         [&](int u) { return valid[u]; }, kAligned ? 16 : chunk_alignment(x, k), raw);
#pragma unroll
  for (int u = 0; u < kTilesPerCta; ++u) {
    // Half warps with no group (valid 0: zeros) still take part in the shuffles (all 16 lanes
    // must); a CTA's last tiles may lie past the grid's work altogether, uniformly for the CTA.
    if (blockIdx.x + int64_t(u) * gridDim.x >= num_tiles) break;
    float f[kVec];
    raw_to_floats<T, /*kWords=*/false>(raw[u], f);  // (see unpack)
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kVec; ++i) amax = mag_max(amax, fabsf(f[i]));
#pragma unroll
    for (int offset = kThreadsPerGroup / 2; offset > 0; offset /= 2)
      amax = mag_max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
    const int stored = kPadded ? chunk_valid(c[u].col, k_out) : valid[u];
    if (stored == 0) continue;
    const float scale = scale_from_amax(amax, pow2);
    // MN-major (s[kb * rows + row]): the layout the GEMMs load, so that a quantize -> GEMM pipeline
    // needs no transpose in between (jax_fp8gemm/quantize.py hands s on transposed; XLA cancels).
    if (lane_in_group == 0) s[c[u].kb * rows + c[u].row] = scale;
    store_vec<kAligned>(q + c[u].row * k_out + c[u].col, stored, f, 1.0f / scale);
  }
}

// One CTA of 256 threads per 128x128 block: thread t holds rows t/16 + 16*i (i < 8) at columns
// (t % 16) * 8 .. +8, i.e. 64 values in registers; amax is reduced over the CTA, then written.
// 16-bit inputs stay packed (8 x 16 B = 32 registers instead of 64 floats) so that three CTAs fit
// on an SM (80 registers; bf16 took 88 and two until session 59): while one CTA reduces or
// stores, the others' loads are in flight.
constexpr int kBlockThreads = 256;
constexpr int kRowsPerPass = kBlockThreads / kThreadsPerGroup;  // 16
constexpr int kPasses = kGroup / kRowsPerPass;                  // 8


template <typename T, bool kAligned>
__global__ void __launch_bounds__(kBlockThreads, sizeof(T) == 2 ? 3 : 2)
    quantize_blockwise_kernel(const T* __restrict__ x, int64_t n, int64_t k, int64_t k_out, bool pow2,
                              uint8_t* __restrict__ q, float* __restrict__ s) {
  const int64_t n_blocks = (n + kGroup - 1) / kGroup, k_blocks = (k + kGroup - 1) / kGroup;
  // blockIdx.x: the flat index over [batch, n_blocks, k_blocks], by 32-bit division (as above).
  const uint32_t block = blockIdx.x, band = block / uint32_t(k_blocks);
  const int64_t batch = band / uint32_t(n_blocks), nb = band % uint32_t(n_blocks);
  const int64_t kb = block - band * uint32_t(k_blocks);
  const int64_t col = kb * kGroup + (threadIdx.x % kThreadsPerGroup) * kVec;
  const int valid = chunk_valid(col, k), stored = chunk_valid(col, k_out);  // stored: + zero padding
  const T* xb = x + batch * n * k;
  uint8_t* qb = q + batch * n * k_out;
  auto row_of = [&](int p) { return nb * kGroup + p * kRowsPerPass + threadIdx.x / kThreadsPerGroup; };

  // All 8 rows' chunks loaded before any is used (16-bit ones stay packed: 32 registers).
  uint4 raw[kPasses][kRawWords<T>];
  load_chunks<T, kAligned, kPasses>([&](int p) { return xb + row_of(p) * k + col; },
                                    [&](int p) { return row_of(p) < n ? valid : 0; }, kAligned ? 16 : chunk_alignment(x, k),
                                    raw);
  float amax = 0.0f;
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    float f[kVec];
    raw_to_floats<T>(raw[p], f);
#pragma unroll
    for (int i = 0; i < kVec; ++i) amax = mag_max(amax, fabsf(f[i]));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    amax = mag_max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
  __shared__ float warp_amax[kBlockThreads / 32];
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kBlockThreads / 32; ++w) amax = mag_max(amax, warp_amax[w]);

  const float scale = scale_from_amax(amax, pow2), inv = 1.0f / scale;
  if (threadIdx.x == 0) s[block] = scale;
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int64_t row = row_of(p);
    const int row_stored = row < n ? stored : 0;
    float f[kVec];
    raw_to_floats<T>(raw[p], f);
    if (kAligned && row_stored == kVec)
      store_vec<true>(qb + row * k_out + col, row_stored, f, inv);
    else if (row_stored > 0)
      store_vec<false>(qb + row * k_out + col, row_stored, f, inv);
  }
}

// Rows start 16-byte aligned (for the input) and 8-byte aligned (for the e4m3 output) when k is a
// multiple of 8 elements (k_out then is too: padding_ok); the buffers come 16-byte aligned from XLA.
bool rows_aligned(int64_t k) { return k % kVec == 0; }

template <typename T>
cudaError_t rowwise(const void* x, int64_t rows, int64_t k, int64_t k_out, bool pow2, void* q, float* s,
                    cudaStream_t stream) {
  const int64_t k_groups = (k + kGroup - 1) / kGroup;
  if (rows == 0 || k_groups == 0) return cudaSuccess;
  constexpr int kThreads = kTileRows * kTileGroups * kThreadsPerGroup;  // 256
  const int64_t tiles = (rows + kTileRows - 1) / kTileRows * ((k_groups + kTileGroups - 1) / kTileGroups);
  const int64_t blocks = (tiles + kTilesPerCta - 1) / kTilesPerCta;
  if (blocks > 0x7FFFFFFF) return cudaErrorInvalidValue;
  const bool padded = k_out != k;
  auto kernel = rows_aligned(k)
      ? (padded ? quantize_rowwise_kernel<T, true, true> : quantize_rowwise_kernel<T, true, false>)
      : (padded ? quantize_rowwise_kernel<T, false, true> : quantize_rowwise_kernel<T, false, false>);
  kernel<<<unsigned(blocks), kThreads, 0, stream>>>(static_cast<const T*>(x), rows, k, k_out, pow2,
                                                    static_cast<uint8_t*>(q), s);
  return cudaGetLastError();
}

template <typename T>
cudaError_t blockwise(const void* x, int64_t batch, int64_t n, int64_t k, int64_t k_out, bool pow2, void* q,
                      float* s, cudaStream_t stream) {
  const int64_t blocks = batch * ((n + kGroup - 1) / kGroup) * ((k + kGroup - 1) / kGroup);
  if (blocks == 0) return cudaSuccess;
  if (blocks > 0x7FFFFFFF) return cudaErrorInvalidValue;
  auto kernel = rows_aligned(k) ? quantize_blockwise_kernel<T, true> : quantize_blockwise_kernel<T, false>;
  kernel<<<unsigned(blocks), kBlockThreads, 0, stream>>>(static_cast<const T*>(x), n, k, k_out, pow2,
                                                         static_cast<uint8_t*>(q), s);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_quantize_rowwise(const void* x, InDtype dtype, int64_t rows, int64_t k, int64_t k_out,
                                    bool pow2_scale, void* q, float* s, cudaStream_t stream) {
  if (!padding_ok(k, k_out)) return cudaErrorInvalidValue;
  switch (dtype) {
    case InDtype::kF32: return rowwise<float>(x, rows, k, k_out, pow2_scale, q, s, stream);
    case InDtype::kBF16: return rowwise<__nv_bfloat16>(x, rows, k, k_out, pow2_scale, q, s, stream);
    case InDtype::kF16: return rowwise<__half>(x, rows, k, k_out, pow2_scale, q, s, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_quantize_blockwise(const void* x, InDtype dtype, int64_t batch, int64_t n,
                                      int64_t k, int64_t k_out, bool pow2_scale, void* q, float* s,
                                      cudaStream_t stream) {
  if (!padding_ok(k, k_out)) return cudaErrorInvalidValue;
  switch (dtype) {
    case InDtype::kF32: return blockwise<float>(x, batch, n, k, k_out, pow2_scale, q, s, stream);
    case InDtype::kBF16: return blockwise<__nv_bfloat16>(x, batch, n, k, k_out, pow2_scale, q, s, stream);
    case InDtype::kF16: return blockwise<__half>(x, batch, n, k, k_out, pow2_scale, q, s, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace fp8gemm
