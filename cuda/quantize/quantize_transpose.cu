// Fused quantize + transpose: one read of x [rows, cols] gives both orientations a training step
// needs (DeepSeek-V3 recipe), so XLA never materializes a transposed bf16 copy:
//   row-wise mode:  q  = quantize_rowwise(x)    (1x128 groups along cols)  -> the GEMM operand
//                   qt = quantize_rowwise(x.T)  (1x128 groups along rows)  -> the wgrad operand
//   blockwise mode: q  = quantize_blockwise(x), qt = its transpose (same 128x128 block scales)
// Bitwise the reference's math (quantize_math.cuh). Row-wise scales are written MN-major
// (s as [cdiv(cols,128), rows], st as [cdiv(rows,128), cols]): a tile's 128 scales of each kind
// are then one contiguous 512-byte run instead of 128 scattered floats (+4-7% throughput,
// RESULTS.md session 12), and it is the layout the GEMMs load anyway.
//
// One CTA per 128x128 tile, R rows per thread: thread t = 16 * g + l (g < 128 / R half warps,
// l < 16) holds the R consecutive rows Rg .. Rg+R-1 at the 8 columns 8l .. 8l+7: a row's 128
// values sit in one half warp (row amax = 4 shuffles), and a column's R values per thread are R
// consecutive rows, so its e4m3 bytes form one R-byte word of the transposed tile. The transposed
// tile is staged in shared memory (16 KB) and written out as 16-byte rows.
//   R = 8 (256 threads, up to 128 registers): the plain quantizers, memory-bound at 2 CTAs per SM.
//   R = 4 (512 threads, up to 64 registers): the fused activations. Their float math between the
//     loads and the stores is long; twice the warps per SM hide it (RESULTS.md, session 13).
#include "quantize/quantize.h"

#include <type_traits>

#include "quantize/quantize_math.cuh"

namespace fp8gemm {
namespace {

using namespace quant;

constexpr int kChunk = 16;                        // bytes of one shared-memory chunk / global store

// Threads of a CTA that holds kRows rows per thread.
template <int kRows>
constexpr int threads_for() { return kGroup / kRows * kThreadsPerGroup; }

// Rows per thread of each variant (see the top of the file).
template <Act kAct>
constexpr int rows_per_thread() { return kAct == Act::kNone ? 8 : 4; }

// Byte offset of (tile column c, tile row m) in the transposed tile [128 columns][128 rows].
// The 16-byte chunk index is XOR-swizzled with (c / 8) % 8: the R-byte stores of one warp
// (16 columns 8 apart x 2 row groups) then take the minimum of wavefronts (2), and the 16-byte
// row reads of a quarter warp stay conflict-free.
__device__ __forceinline__ int t_offset(int c, int m) {
  return c * kGroup + (((m / kChunk) ^ ((c / kVec) % 8)) * kChunk) + m % kChunk;
}

// A 16-bit float's magnitude bits (sign cleared) as a float.
template <typename T>
__device__ __forceinline__ float magnitude_to_float(uint32_t bits) {
  if constexpr (sizeof(T) == 2 && std::is_same_v<T, __nv_bfloat16>)
    return __uint_as_float(bits << 16);
  else
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}

// kAct (row-wise only): the values quantized are act(x) (kGelu) or x * act'(u) (kGeluGrad, u of
// x's shape), rounded to T, computed right after the loads.
template <typename T, bool kAlignedIn, bool kAlignedT, bool kBlockwise, Act kAct,
          int kRowsPerThread = rows_per_thread<kAct>(), int kThreads = threads_for<kRowsPerThread>()>
__global__ void __launch_bounds__(kThreads, 2)  // two CTAs per SM: one loads while one stores
    quantize_transpose_kernel(const T* __restrict__ x, const T* __restrict__ u, int64_t rows, int64_t cols,
                              bool pow2, uint8_t* __restrict__ q, float* __restrict__ s,
                              uint8_t* __restrict__ qt, float* __restrict__ st) {
  static_assert(kAct == Act::kNone || !kBlockwise, "activations come with row-wise scaling");
  constexpr bool kPacked = kAlignedIn && sizeof(T) == 2;
  constexpr int kWarps = kThreads / 32;
  static_assert(kRowsPerThread == 4 || kRowsPerThread == 8, "a column's bytes: one 4- or 8-byte word");
  __shared__ __align__(16) uint8_t tile_t[kGroup * kGroup];
  __shared__ float part_amax[kWarps][kGroup];     // per-warp column amax (row-wise mode)
  __shared__ float col_scale[kGroup];
  __shared__ float block_amax[kWarps];            // per-warp amax (blockwise mode)

  const int64_t row_tiles = (rows + kGroup - 1) / kGroup, col_tiles = (cols + kGroup - 1) / kGroup;
  const int64_t tile = blockIdx.x;                // flat over [batch, row_tiles, col_tiles]
  const int64_t batch = tile / (row_tiles * col_tiles);
  const int64_t rt = tile / col_tiles % row_tiles, ct = tile % col_tiles;
  const int g = threadIdx.x / kThreadsPerGroup, l = threadIdx.x % kThreadsPerGroup;
  const int warp = threadIdx.x / 32;
  const int64_t row0 = rt * kGroup + g * kRowsPerThread;  // first of this thread's rows
  const int64_t col = ct * kGroup + l * kVec;              // first of this thread's columns
  const int valid = chunk_valid(col, cols);
  x += batch * rows * cols;
  if constexpr (kAct == Act::kGeluGrad) u += batch * rows * cols;
  q += batch * rows * cols;
  qt += batch * rows * cols;

  // Load: packed 16-bit chunks (kPacked) or floats; rows past the end read as zeros.
  uint4 raw[kPacked ? kRowsPerThread : 1];
  float v[kPacked ? 1 : kRowsPerThread][kVec];
  auto values = [&](int p, float (&f)[kVec]) {
    if constexpr (kPacked) {
      unpack<T>(raw[p], f);
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) f[i] = v[p][i];
    }
  };
#pragma unroll
  for (int p = 0; p < kRowsPerThread; ++p) {
    const int64_t row = row0 + p;
    const int row_valid = row < rows ? valid : 0;
    const T* src = x + row * cols + col;
    if constexpr (kPacked) {
      raw[p] = row_valid == kVec ? __ldg(reinterpret_cast<const uint4*>(src)) : make_uint4(0, 0, 0, 0);
    } else if (kAlignedIn && row_valid == kVec) {
      load_vec<T, true>(src, row_valid, v[p]);
    } else {
      load_vec<T, false>(src, row_valid, v[p]);
    }
  }
  if constexpr (kAct != Act::kNone) {
    // act(0) = 0 and 0 * act'(u) = 0: the zero padding past the edges stays zero.
#pragma unroll
    for (int p = 0; p < kRowsPerThread; ++p) {
      const int64_t row = row0 + p;
      const int row_valid = row < rows ? valid : 0;
      float uf[kVec] = {};
      if constexpr (kAct == Act::kGeluGrad) {
        if (kAlignedIn && row_valid == kVec)
          load_vec<T, true>(u + row * cols + col, row_valid, uf);
        else
          load_vec<T, false>(u + row * cols + col, row_valid, uf);
      }
      float f[kVec];
      values(p, f);
      alignas(16) T out[kVec];
#pragma unroll
      for (int i = 0; i < kVec; ++i) out[i] = from_float<T>(activate<kAct>(f[i], uf[i]));
      if constexpr (kPacked) {
        raw[p] = *reinterpret_cast<const uint4*>(out);
      } else {
#pragma unroll
        for (int i = 0; i < kVec; ++i) v[p][i] = to_float(out[i]);
      }
    }
  }

  // Amax: per row (over the half warp) and per column (over the CTA), or per block.
  float row_amax[kRowsPerThread], col_amax[kVec];
  if constexpr (kPacked) {
    // Magnitude bits of a 16-bit float compare like its value (sign-magnitude, NaN above inf), so
    // an unsigned max of (bits & 0x7FFF) is nan_max of |x|, two values per 32-bit word at once.
    uint32_t col_mag[kVec / 2] = {};
#pragma unroll
    for (int p = 0; p < kRowsPerThread; ++p) {
      const uint32_t* word = reinterpret_cast<const uint32_t*>(&raw[p]);
      uint32_t row_mag = 0;
#pragma unroll
      for (int j = 0; j < kVec / 2; ++j) {
        const uint32_t mag = word[j] & 0x7FFF7FFFu;
        col_mag[j] = __vmaxu2(col_mag[j], mag);
        row_mag = __vmaxu2(row_mag, mag);
      }
      row_amax[p] = magnitude_to_float<T>(max(row_mag & 0xFFFFu, row_mag >> 16));
    }
#pragma unroll
    for (int j = 0; j < kVec / 2; ++j) {
      col_amax[2 * j] = magnitude_to_float<T>(col_mag[j] & 0xFFFFu);
      col_amax[2 * j + 1] = magnitude_to_float<T>(col_mag[j] >> 16);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) col_amax[i] = 0.0f;
#pragma unroll
    for (int p = 0; p < kRowsPerThread; ++p) {
      row_amax[p] = 0.0f;
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        row_amax[p] = nan_max(row_amax[p], fabsf(v[p][i]));
        col_amax[i] = nan_max(col_amax[i], fabsf(v[p][i]));
      }
    }
  }
  float row_s[kRowsPerThread];
  if constexpr (kBlockwise) {
    float amax = 0.0f;
#pragma unroll
    for (int p = 0; p < kRowsPerThread; ++p) amax = nan_max(amax, row_amax[p]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      amax = nan_max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
    if (threadIdx.x % 32 == 0) block_amax[warp] = amax;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < kWarps; ++w) amax = nan_max(amax, block_amax[w]);
    const float scale = scale_from_amax(amax, pow2);
    if (threadIdx.x < kGroup) col_scale[threadIdx.x] = scale;
#pragma unroll
    for (int p = 0; p < kRowsPerThread; ++p) row_s[p] = scale;
    if (threadIdx.x == 0) {
      s[(batch * row_tiles + rt) * col_tiles + ct] = scale;
      st[(batch * col_tiles + ct) * row_tiles + rt] = scale;
    }
  } else {
#pragma unroll
    for (int p = 0; p < kRowsPerThread; ++p) {
#pragma unroll
      for (int offset = kThreadsPerGroup / 2; offset > 0; offset /= 2)
        row_amax[p] = nan_max(row_amax[p], __shfl_xor_sync(0xFFFFFFFFu, row_amax[p], offset));
      row_s[p] = scale_from_amax(row_amax[p], pow2);
    }
    // Lanes l and l + 16 hold the same columns (row octets g and g + 1).
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      col_amax[i] = nan_max(col_amax[i], __shfl_xor_sync(0xFFFFFFFFu, col_amax[i], 16));
      if (threadIdx.x % 32 < kThreadsPerGroup) part_amax[warp][l * kVec + i] = col_amax[i];
    }
    __syncthreads();
    if (threadIdx.x < kGroup) {
      float amax = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) amax = nan_max(amax, part_amax[w][threadIdx.x]);
      const float scale = scale_from_amax(amax, pow2);
      col_scale[threadIdx.x] = scale;
      const int64_t c = ct * kGroup + threadIdx.x;
      if (c < cols) st[(batch * row_tiles + rt) * cols + c] = scale;  // MN-major: 512 B per tile
    }
    if (l == 0) {
#pragma unroll
      for (int p = 0; p < kRowsPerThread; ++p)
        if (row0 + p < rows) s[(batch * col_tiles + ct) * rows + row0 + p] = row_s[p];  // MN-major
    }
  }

  // q: the rows as they are, 8 bytes per thread and row.
#pragma unroll
  for (int p = 0; p < kRowsPerThread; ++p) {
    const int64_t row = row0 + p;
    const int row_valid = row < rows ? valid : 0;
    float f[kVec];
    values(p, f);
    if (kAlignedIn && row_valid == kVec)
      store_vec<true>(q + row * cols + col, row_valid, f, row_s[p]);
    else if (row_valid > 0)
      store_vec<false>(q + row * cols + col, row_valid, f, row_s[p]);
  }

  // qt: column i of this thread's chunk, its R rows -> one R-byte word of the transposed tile.
  __syncthreads();  // col_scale
  using Word = typename std::conditional<kRowsPerThread == 8, uint2, uint32_t>::type;
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int c = l * kVec + i;
    float f[kRowsPerThread];
#pragma unroll
    for (int p = 0; p < kRowsPerThread; ++p) {
      float e[kVec];
      values(p, e);
      f[p] = e[i];
    }
    alignas(8) uint8_t out[kRowsPerThread];
    to_e4m3(f, 1.0f / col_scale[c], out);
    *reinterpret_cast<Word*>(&tile_t[t_offset(c, g * kRowsPerThread)]) = *reinterpret_cast<const Word*>(out);
  }
  __syncthreads();

  // Write the transposed tile: qt row (column c of x) gets this tile's 128 rows, 16 B per thread.
  constexpr int kChunksPerRow = kGroup / kChunk;                 // 8
  constexpr int kRowsPerStep = kThreads / kChunksPerRow;         // 32 or 64
  const int chunk = threadIdx.x % kChunksPerRow;
  const int64_t m = rt * kGroup + chunk * kChunk;                // x row of the chunk's first byte
  const int m_valid = m >= rows ? 0 : (rows - m >= kChunk ? kChunk : int(rows - m));
#pragma unroll
  for (int step = 0; step < kGroup / kRowsPerStep; ++step) {
    const int c = step * kRowsPerStep + threadIdx.x / kChunksPerRow;
    const int64_t col_c = ct * kGroup + c;
    if (col_c >= cols || m_valid == 0) continue;
    const uint4 bytes = *reinterpret_cast<const uint4*>(&tile_t[t_offset(c, chunk * kChunk)]);
    uint8_t* dst = qt + col_c * rows + m;
    if (kAlignedT && m_valid == kChunk) {
      *reinterpret_cast<uint4*>(dst) = bytes;
    } else {
      const uint8_t* b = reinterpret_cast<const uint8_t*>(&bytes);
#pragma unroll
      for (int i = 0; i < kChunk; ++i)
        if (i < m_valid) dst[i] = b[i];
    }
  }
}

template <typename T, bool kBlockwise, Act kAct>
cudaError_t launch(const void* x, const void* u, int64_t batch, int64_t rows, int64_t cols, bool pow2, void* q,
                   float* s, void* qt, float* st, cudaStream_t stream) {
  const int64_t tiles = batch * ((rows + kGroup - 1) / kGroup) * ((cols + kGroup - 1) / kGroup);
  constexpr int kThreads = threads_for<rows_per_thread<kAct>()>();
  if (tiles == 0) return cudaSuccess;
  if (tiles > 0x7FFFFFFF) return cudaErrorInvalidValue;
  // Vector paths: x rows start 16-byte aligned (cols % 8 == 0), qt rows 16-byte aligned
  // (rows % 16 == 0); buffers come 16-byte aligned from XLA.
  const bool aligned_in = cols % kVec == 0, aligned_t = rows % kChunk == 0;
  auto kernel = aligned_in
      ? (aligned_t ? quantize_transpose_kernel<T, true, true, kBlockwise, kAct>
                   : quantize_transpose_kernel<T, true, false, kBlockwise, kAct>)
      : (aligned_t ? quantize_transpose_kernel<T, false, true, kBlockwise, kAct>
                   : quantize_transpose_kernel<T, false, false, kBlockwise, kAct>);
  kernel<<<unsigned(tiles), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(u), rows,
                                                   cols, pow2, static_cast<uint8_t*>(q), s,
                                                   static_cast<uint8_t*>(qt), st);
  return cudaGetLastError();
}

template <typename T>
cudaError_t dispatch(bool blockwise, int activation, const void* x, const void* u, int64_t batch, int64_t rows,
                     int64_t cols, bool pow2, void* q, float* s, void* qt, float* st, cudaStream_t stream) {
  if (blockwise)
    return activation == 0 ? launch<T, true, Act::kNone>(x, u, batch, rows, cols, pow2, q, s, qt, st, stream)
                           : cudaErrorInvalidValue;
  switch (static_cast<Act>(activation)) {
    case Act::kNone: return launch<T, false, Act::kNone>(x, u, batch, rows, cols, pow2, q, s, qt, st, stream);
    case Act::kGelu: return launch<T, false, Act::kGelu>(x, u, batch, rows, cols, pow2, q, s, qt, st, stream);
    case Act::kGeluGrad:
      return u ? launch<T, false, Act::kGeluGrad>(x, u, batch, rows, cols, pow2, q, s, qt, st, stream)
               : cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_quantize_transpose(const void* x, InDtype dtype, bool blockwise, int64_t batch,
                                      int64_t rows, int64_t cols, bool pow2_scale, void* q,
                                      float* s, void* qt, float* st, cudaStream_t stream,
                                      int activation, const void* u) {
  switch (dtype) {
    case InDtype::kF32:
      return dispatch<float>(blockwise, activation, x, u, batch, rows, cols, pow2_scale, q, s, qt, st, stream);
    case InDtype::kBF16:
      return dispatch<__nv_bfloat16>(blockwise, activation, x, u, batch, rows, cols, pow2_scale, q, s, qt, st,
                                     stream);
    case InDtype::kF16:
      return dispatch<__half>(blockwise, activation, x, u, batch, rows, cols, pow2_scale, q, s, qt, st, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace fp8gemm
