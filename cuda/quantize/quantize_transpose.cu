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
// A CTA quantizes 128x128 tiles, R rows per thread: thread t = 16 * g + l (g < 128 / R half warps,
// l < 16) holds the R consecutive rows Rg .. Rg+R-1 at the 8 columns 8l .. 8l+7: a row's 128
// values sit in one half warp (row amaxes: reduce_scatter_rows), and a column's R values per thread
// are R consecutive rows, so its e4m3 bytes form one R-byte word of the transposed tile. The transposed
// tile is staged in shared memory (16 KB) and written out as 16-byte rows (the prefetching gelu(x):
// by one TMA store, stores_qt_by_tma).
//   R = 8 (256 threads): the plain quantizers (memory-bound; see ctas_per_sm) and gelu(x).
//   R = 4 (512 threads, up to 64 registers): the gelu gradient, x * gelu'(u) (two inputs). Its float
//     math between the loads and the stores is long; twice the warps per SM hide it (RESULTS.md,
//     session 13). For gelu(x) alone R = 8 measured 10% faster on the H200 (session 27).
//   The fused activations run persistent with the next tile's loads in flight (below; session 14).
#include "quantize/quantize.h"

#include <algorithm>
#include <type_traits>

#include "common/sm90_ptx.cuh"
#include "common/tma_desc.h"
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
constexpr int rows_per_thread() { return kAct == Act::kGeluGrad ? 4 : 8; }

// Byte offset of (tile column c, tile row m) in the transposed tile: 128 rows of 128 bytes. The
// 16-byte chunk index is XOR-swizzled with (c / 8) % 8: the R-byte stores of one warp (16 columns
// 8 apart x 2 row groups) then take the minimum of wavefronts (2), and the 16-byte row reads of a
// quarter warp stay conflict-free. Column c sits in row c, or, where the tile leaves by a TMA store
// (kTmaBox), in row (c % 8) * 16 + c / 8: the order of qt_tensor_map's box, whose 128-byte swizzle
// (chunk XOR row % 8) is then that same XOR.
template <bool kTmaBox>
__device__ __forceinline__ int t_offset(int c, int m) {
  const int row = kTmaBox ? (c % kVec) * (kGroup / kVec) + c / kVec : c;
  return row * kGroup + (((m / kChunk) ^ ((c / kVec) % 8)) * kChunk) + m % kChunk;
}

// Which kernels run persistent and prefetching (see the kernel): the fused activations on packed
// 16-bit inputs.
template <typename T, Act kAct>
constexpr bool prefetches(bool aligned_in) { return aligned_in && sizeof(T) == 2 && kAct != Act::kNone; }

// Which kernels write the transposed tile by one TMA store from thread 0 (qt_tensor_map; qt rows
// 16-byte aligned, rows_out % 16 == 0): the prefetching gelu(x), whose warps then go on to the next
// tile's math instead of 4 shared-memory reads and global stores each: 1.013-1.022x at 4096-8200
// tokens, 0.993-0.997x at 2048 (RESULTS.md, session 73). The gelu gradient (one CTA per SM)
// measured 0.95x that way and the plain kernels even; they store with their threads.
template <typename T, Act kAct>
constexpr bool stores_qt_by_tma(bool aligned_in, bool aligned_t) {
  return prefetches<T, kAct>(aligned_in) && kAct == Act::kGelu && aligned_t;
}

// Resident CTAs per SM each kernel is compiled for (its register budget), so that some load while
// others store: three for the plain kernels on (packed) 16-bit inputs (80 registers, no spills;
// 9-10% faster than two on the H200, RESULTS.md session 27; four spill and run 30% slower), two
// for the others (their float arrays spill at 80), except the prefetching gelu gradient: its
// prefetch stages (two of two inputs, 128 KB) leave room for one CTA anyway, which then gets
// twice the registers (no spills; +1.5-3.5%, RESULTS.md session 14).
template <typename T, Act kAct>
constexpr int ctas_per_sm(bool aligned_in) {
  if (prefetches<T, kAct>(aligned_in)) return kAct == Act::kGeluGrad ? 1 : 2;
  return kAct == Act::kNone && sizeof(T) == 2 ? 3 : 2;
}

// The row-wise amaxes of a half warp, reduce-scattered. Each of its 16 lanes holds partial amaxes
// (over its 8 columns) of the same R rows. At each of the 4 exchange steps a lane keeps half of
// its values (the half its lane bit selects) and receives the other lanes' partials of them; once
// one value is left the steps are plain butterflies. After them lane l holds the amax over all 128
// columns of row row_of_lane(l): R - 1 + 4 - log2(R) shuffles (5 for R = 4, 8 for R = 8) instead
// of 4 R, and one scale and division per lane instead of R.
template <int R>
__device__ __forceinline__ int row_of_lane(int l) { return l / (kThreadsPerGroup / R); }
template <int R>
__device__ __forceinline__ int lane_of_row(int row) { return row * (kThreadsPerGroup / R); }  // its first

template <int R>
__device__ __forceinline__ float reduce_scatter_rows(float (&amax)[R], int l) {
#pragma unroll
  for (int step = 0; step < 4; ++step) {
    const int offset = kThreadsPerGroup / 2 >> step;
    const int kept = R >> (step + 1);  // values a lane keeps after this step; 0: a butterfly
    const bool upper = l & offset;
    if (kept > 0) {
#pragma unroll
      for (int j = 0; j < kept; ++j) {
        const float mine = upper ? amax[kept + j] : amax[j], theirs = upper ? amax[j] : amax[kept + j];
        amax[j] = mag_max(mine, __shfl_xor_sync(0xFFFFFFFFu, theirs, offset));
      }
    } else {
      amax[0] = mag_max(amax[0], __shfl_xor_sync(0xFFFFFFFFu, amax[0], offset));
    }
  }
  return amax[0];
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
//
// The fused activations on packed 16-bit inputs (kPrefetch) run persistent: each CTA walks tiles
// blockIdx.x, + gridDim.x, ... and, while it quantizes one, its threads copy their chunks of the
// next (cp.async, 16 B each) into two shared-memory stages of per-thread slots. A thread reads only
// its own slots, so the pipeline needs no barrier, only cp.async.wait_group. Their math keeps the
// issue slots busy; with the loads of the next tile already in flight, memory stays busy too
// (gelu +4%, gelu grad +24%). The other variants take one tile per CTA, loaded with plain vector
// loads: the plain quantizers are memory-bound and measured 8-14% slower persistent (RESULTS.md,
// session 14).
template <typename T, bool kAlignedIn, bool kAlignedT, bool kBlockwise, Act kAct,
          int kRowsPerThread = rows_per_thread<kAct>(), int kThreads = threads_for<kRowsPerThread>()>
__global__ void __launch_bounds__(kThreads, ctas_per_sm<T, kAct>(kAlignedIn))
    quantize_transpose_kernel(const T* __restrict__ x, const T* __restrict__ u, int64_t batches, int64_t rows,
                              int64_t cols, int64_t rows_out, int64_t cols_out, bool pow2,
                              uint8_t* __restrict__ q, float* __restrict__ s,
                              uint8_t* __restrict__ qt, float* __restrict__ st,
                              const __grid_constant__ CUtensorMap qt_map) {
  static_assert(kAct == Act::kNone || !kBlockwise, "activations come with row-wise scaling");
  constexpr bool kPacked = sizeof(T) == 2;  // chunks stay packed 16-bit words (see the amax)
  constexpr bool kPrefetch = prefetches<T, kAct>(kAlignedIn);
  constexpr int kInputs = kAct == Act::kGeluGrad ? 2 : 1;  // x, and u for the gradient
  constexpr int kWarps = kThreads / 32;
  // Row-wise column scales: a CTA alone on its SM (the prefetching gelu gradient) would wait at a
  // second barrier with nothing else to run while 128 threads divide, so there every warp makes the
  // inverse scales of the 128 columns itself (below): gelu grad 1.08-1.09x. With two or three CTAs
  // per SM the other CTAs fill that wait, and the extra instructions cost more (gelu 0.98x, plain
  // 0.99x; RESULTS.md, session 72).
  constexpr bool kColumnScalesPerWarp = !kBlockwise && ctas_per_sm<T, kAct>(kAlignedIn) == 1;
  static_assert(kRowsPerThread == 4 || kRowsPerThread == 8, "a column's bytes: one 4- or 8-byte word");
  constexpr bool kTmaStore = stores_qt_by_tma<T, kAct>(kAlignedIn, kAlignedT);
  // A TMA store's 128-byte swizzle repeats every 1024 bytes of shared memory and starts at 0 there.
  __shared__ alignas(kTmaStore ? 1024 : 16) uint8_t tile_t[kGroup * kGroup];
  __shared__ __align__(16) float part_amax[kWarps][kGroup];  // per-warp column amax (row-wise mode)
  __shared__ float col_inv[kGroup];               // 1 / column scale: divided once per column
  __shared__ float block_amax[kWarps];            // per-warp amax (blockwise mode)
  // kPrefetch: [2 stages][kInputs][kRowsPerThread][kThreads] chunks (dynamic; a warp's 32 chunks of
  // one row index are contiguous: conflict-free 16-byte accesses).
  extern __shared__ uint4 prefetched[];
  auto slot = [&](int stage, int input, int p) -> uint4* {
    return &prefetched[((stage * kInputs + input) * kRowsPerThread + p) * kThreads + threadIdx.x];
  };

  const int64_t row_tiles = (rows + kGroup - 1) / kGroup, col_tiles = (cols + kGroup - 1) / kGroup;
  const int64_t num_tiles = batches * row_tiles * col_tiles;  // flat over [batch, row_tiles, col_tiles]
  // q and s wanted (else only qt and st are written). Only blockwise callers leave them out (a
  // weight needed in one orientation); the row-wise kernels keep the flag a compile-time true (as
  // a runtime flag it costs the 64-register activation kernels spills).
  const bool straight = !kBlockwise || q != nullptr;
  const int g = threadIdx.x / kThreadsPerGroup, l = threadIdx.x % kThreadsPerGroup;
  const int warp = threadIdx.x / 32;
  // A tile's (batch, row tile, column tile), by 32-bit division (the launch keeps num_tiles < 2^31).
  struct Coords { uint32_t batch, rt, ct; };  // 32-bit: fewer registers live across the tile
  auto coords = [&](int64_t tile) {
    const uint32_t t = uint32_t(tile), band = t / uint32_t(col_tiles);
    return Coords{band / uint32_t(row_tiles), band % uint32_t(row_tiles), t % uint32_t(col_tiles)};
  };
  // The persistent loop steps gridDim.x tiles at a time: digit-wise addition of coords(gridDim.x)
  // with carries. coords() per tile and again per prefetched tile made four 32-bit divisions of
  // ~20 instructions each, the reciprocals recomputed every time (gelu grad 1.07x; session 61).
  const Coords stride = coords(gridDim.x);
  auto advance = [&](Coords c) {
    c.ct += stride.ct;
    const uint32_t carry_ct = c.ct >= uint32_t(col_tiles);
    if (carry_ct) c.ct -= uint32_t(col_tiles);
    c.rt += stride.rt + carry_ct;
    const uint32_t carry_rt = c.rt >= uint32_t(row_tiles);
    if (carry_rt) c.rt -= uint32_t(row_tiles);
    c.batch += stride.batch + carry_rt;
    return c;
  };
  // This thread's first row and column in a tile, and the offset of the tile's batch in x (q and
  // qt: rows zero-padded to cols_out and rows_out, quantize.h).
  auto first_row = [&](const Coords& c) { return int64_t(c.rt) * kGroup + g * kRowsPerThread; };
  auto first_col = [&](const Coords& c) { return int64_t(c.ct) * kGroup + l * kVec; };
  // How many of this thread's rows from row0 on lie in x (0 .. R): 32-bit row tests after it.
  auto rows_in = [&](int64_t row0) {
    const int64_t left = rows - row0;
    return left <= 0 ? 0 : left >= kRowsPerThread ? kRowsPerThread : int(left);
  };
  auto batch_offset = [&](const Coords& c) { return c.batch * rows * cols; };

  // cp.async of this thread's chunks of tile `tile` into `stage` (rows past the end: zeros), one
  // commit group per call (empty past the last tile, so that wait_group<1> always means "all but
  // the newest").
  auto prefetch = [&](int64_t tile, const Coords& c, int stage) {
    if constexpr (kPrefetch) {
      if (tile < num_tiles) {
        const int64_t row0 = first_row(c), col = first_col(c), base = batch_offset(c);
        const int in_rows = col < cols ? rows_in(row0) : 0;  // kPacked: a chunk is all in or all out
#pragma unroll
        for (int p = 0; p < kRowsPerThread; ++p) {
          const bool ok = p < in_rows;
          const int64_t at = ok ? base + (row0 + p) * cols + col : 0;
          ptx::cp_async_16(slot(stage, 0, p), x + at, ok);
          if constexpr (kInputs == 2) ptx::cp_async_16(slot(stage, 1, p), u + at, ok);
        }
      }
      ptx::cp_async_commit();
    }
  };

  Coords next = coords(blockIdx.x);
  prefetch(blockIdx.x, next, 0);
  int stage = 0;
  for (int64_t tile = blockIdx.x; tile < num_tiles; tile += gridDim.x, stage ^= 1) {
    const Coords tc = next;
    if constexpr (kPrefetch) {
      next = advance(next);
      prefetch(tile + gridDim.x, next, stage ^ 1);
    }
    const uint32_t batch = tc.batch, rt = tc.rt, ct = tc.ct;
    const int64_t row0 = first_row(tc);  // first of this thread's rows
    const int64_t col = first_col(tc);   // first of this thread's columns
    const int valid = chunk_valid(col, cols);
    const int64_t base = batch_offset(tc);
    const int in_rows = rows_in(row0);

    // Load: every row's chunk before any is used (prefetched with kPrefetch), as raw words (16-bit
    // ones stay packed); rows past the end read as zeros.
    uint4 raw[kRowsPerThread][kRawWords<T>];
    auto values = [&](int p, float (&f)[kVec]) { raw_to_floats<T>(raw[p], f); };
    auto load_rows = [&](const T* in, int first, auto& out) {  // rows row0 + first, ... of x or u
      constexpr int kRows = std::extent_v<std::remove_reference_t<decltype(out)>>;
      load_chunks<T, kAlignedIn, kRows>([&](int p) { return in + base + (row0 + first + p) * cols + col; },
                                        [&](int p) { return first + p < in_rows ? valid : 0; },
                                        kAlignedIn ? 16 : chunk_alignment(in, cols), out);
    };
    if constexpr (kPrefetch) {
      ptx::cp_async_wait<1>();  // this tile's group (the newest is the next tile's)
#pragma unroll
      for (int p = 0; p < kRowsPerThread; ++p) raw[p][0] = *slot(stage, 0, p);
    } else {
      load_rows(x, 0, raw);
    }
    if constexpr (kAct != Act::kNone) {
      // act(0) = 0 and 0 * act'(u) = 0: the zero padding past the edges stays zero.
#pragma unroll
      for (int p = 0; p < kRowsPerThread; ++p) {
        float uf[kVec] = {};
        if constexpr (kAct == Act::kGeluGrad && kPrefetch) {
          unpack<T>(*slot(stage, 1, p), uf);
        } else if constexpr (kAct == Act::kGeluGrad) {
          uint4 u_raw[1][kRawWords<T>];  // a row at a time: all rows at once spill at 64 registers
          load_rows(u, p, u_raw);
          raw_to_floats<T>(u_raw[0], uf);
        }
        float f[kVec];
        values(p, f);
        uint32_t* word = reinterpret_cast<uint32_t*>(raw[p]);
        if constexpr (kPacked) {
#pragma unroll
          for (int j = 0; j < kVec / 2; ++j)
            word[j] = round_pair<T>(activate<kAct>(f[2 * j], uf[2 * j]),
                                    activate<kAct>(f[2 * j + 1], uf[2 * j + 1]));
        } else {
#pragma unroll
          for (int i = 0; i < kVec; ++i) word[i] = __float_as_uint(activate<kAct>(f[i], uf[i]));
        }
      }
    }

    // Amax: per row (over the half warp) and per column (over the CTA), or per block.
    float row_amax[kRowsPerThread], col_amax[kVec];
    if constexpr (kPacked) {
      // Magnitude bits of a 16-bit float compare like its value (sign-magnitude, NaN above inf), so
      // an unsigned max of (bits & 0x7FFF) is mag_max of |x|, two values per 32-bit word at once.
      uint32_t col_mag[kVec / 2] = {};
#pragma unroll
      for (int p = 0; p < kRowsPerThread; ++p) {
        const uint32_t* word = reinterpret_cast<const uint32_t*>(&raw[p][0]);
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
        float f[kVec];
        values(p, f);
        row_amax[p] = 0.0f;
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          row_amax[p] = mag_max(row_amax[p], fabsf(f[i]));
          col_amax[i] = mag_max(col_amax[i], fabsf(f[i]));
        }
      }
    }
    // tile_t is written after the next barrier: the previous tile's store must have read it.
    if (kTmaStore && threadIdx.x == 0) ptx::bulk_wait_group_read<0>();
    float row_inv[kRowsPerThread];  // 1 / the scale of each of this thread's rows
    float own_col_inv[kVec];        // kColumnScalesPerWarp: 1 / the scale of each of its columns
    if constexpr (kBlockwise) {
      float amax = 0.0f;
#pragma unroll
      for (int p = 0; p < kRowsPerThread; ++p) amax = mag_max(amax, row_amax[p]);
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2)
        amax = mag_max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
      if (threadIdx.x % 32 == 0) block_amax[warp] = amax;
      __syncthreads();
#pragma unroll
      for (int w = 0; w < kWarps; ++w) amax = mag_max(amax, block_amax[w]);
      const float scale = scale_from_amax(amax, pow2), inv = 1.0f / scale;
      if (threadIdx.x < kGroup) col_inv[threadIdx.x] = inv;
#pragma unroll
      for (int p = 0; p < kRowsPerThread; ++p) row_inv[p] = inv;
      if (threadIdx.x == 0) {
        if (straight) s[(batch * row_tiles + rt) * col_tiles + ct] = scale;
        st[(batch * col_tiles + ct) * row_tiles + rt] = scale;
      }
    } else {
      // One row per lane after the reduce-scatter: one scale and one division per lane, handed
      // back to the half warp's lanes by shuffles.
      const int my_row = row_of_lane<kRowsPerThread>(l);
      const float my_scale = scale_from_amax(reduce_scatter_rows(row_amax, l), pow2);
      const float my_inv = 1.0f / my_scale;
#pragma unroll
      for (int p = 0; p < kRowsPerThread; ++p)
        row_inv[p] = __shfl_sync(0xFFFFFFFFu, my_inv,
                                 (threadIdx.x & kThreadsPerGroup) + lane_of_row<kRowsPerThread>(p));
      if (straight && l == lane_of_row<kRowsPerThread>(my_row) && my_row < in_rows)
        s[(batch * col_tiles + ct) * rows + row0 + my_row] = my_scale;  // MN-major
      // Lanes l and l + 16 hold the same columns (row octets g and g + 1).
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        col_amax[i] = mag_max(col_amax[i], __shfl_xor_sync(0xFFFFFFFFu, col_amax[i], 16));
        if (threadIdx.x % 32 < kThreadsPerGroup) part_amax[warp][l * kVec + i] = col_amax[i];
      }
      __syncthreads();
      if constexpr (kColumnScalesPerWarp) {
        // Lane l of half h = 0, 1 of a warp makes those of columns 8l + 4h .. 8l + 4h + 3 (one
        // 16-byte read of each warp's partials) and swaps them with lane l ^ 16 for its other four.
        const int h = threadIdx.x / kThreadsPerGroup % 2;
        float amax4[4] = {};
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          const float4 part = *reinterpret_cast<const float4*>(&part_amax[w][l * kVec + 4 * h]);
          amax4[0] = mag_max(amax4[0], part.x);
          amax4[1] = mag_max(amax4[1], part.y);
          amax4[2] = mag_max(amax4[2], part.z);
          amax4[3] = mag_max(amax4[3], part.w);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float scale = scale_from_amax(amax4[j], pow2), mine = 1.0f / scale;
          const float theirs = __shfl_xor_sync(0xFFFFFFFFu, mine, 16);
          own_col_inv[j] = h ? theirs : mine;
          own_col_inv[4 + j] = h ? mine : theirs;
          const int64_t c = int64_t(ct) * kGroup + l * kVec + 4 * h + j;
          if (warp == 0 && c < cols) st[(batch * row_tiles + rt) * cols + c] = scale;  // MN-major
        }
      } else if (threadIdx.x < kGroup) {
        float amax = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) amax = mag_max(amax, part_amax[w][threadIdx.x]);
        const float scale = scale_from_amax(amax, pow2);
        col_inv[threadIdx.x] = 1.0f / scale;
        const int64_t c = int64_t(ct) * kGroup + threadIdx.x;
        if (c < cols) st[(batch * row_tiles + rt) * cols + c] = scale;  // MN-major: 512 B per tile
      }
    }

    // q and qt in one pass over row pairs, each element unpacked once (a q pass and a qt pass
    // unpacked it twice; session 61). Row p's chunk becomes its 8-byte q chunk; column i's values
    // of rows p and p + 1 become one e4m3 pair, merged into the R-byte word of column i (rows
    // 4k .. 4k + 3: one uint32, the second pair into the upper half: F2FP ... PACK_AB_MERGE_C).
    // A row pair's 16 floats die with it. q's rows: x's columns, then the zero padding up to
    // cols_out (a whole chunk or none where kAlignedIn); rows past x's are not written.
    if constexpr (!kColumnScalesPerWarp) __syncthreads();  // col_inv
    const bool in_q = straight && col < cols_out;
    uint32_t qt_word[kVec][kRowsPerThread / 4];
#pragma unroll
    for (int p = 0; p < kRowsPerThread; p += 2) {
      float f[2][kVec];
      values(p, f[0]);
      values(p + 1, f[1]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // converted outside the branch: its unpacks then serve qt too
        alignas(8) uint32_t q_word[kVec / 4];
        to_e4m3(f[h], row_inv[p + h], q_word);
        uint8_t* const dst = q + (batch * rows + row0 + p + h) * cols_out + col;
        if (in_q && p + h < in_rows)
          store_bytes<kVec, kAlignedIn>(dst, reinterpret_cast<const uint8_t*>(q_word),
                                        kAlignedIn ? kVec : chunk_valid(col, cols_out));
      }
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const uint32_t pair =
            e4m3_pair(f[0][i], f[1][i], kColumnScalesPerWarp ? own_col_inv[i] : col_inv[l * kVec + i]);
        uint32_t& word = qt_word[i][p / 4];
        word = p % 4 == 0 ? pair : word | pair << 16;
      }
    }
    using Word = typename std::conditional<kRowsPerThread == 8, uint2, uint32_t>::type;
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      *reinterpret_cast<Word*>(&tile_t[t_offset<kTmaStore>(l * kVec + i, g * kRowsPerThread)]) =
          *reinterpret_cast<const Word*>(qt_word[i]);
    if constexpr (kTmaStore) {
      ptx::fence_proxy_async_shared();  // the tile's generic writes, before the async proxy reads it
      __syncthreads();
      if (threadIdx.x == 0) {  // clipped to x's columns and qt's rows_out (the tile's zeros up to it)
        ptx::tma_store_4d(&qt_map, tile_t, int32_t(rt) * kGroup, int32_t(ct) * (kGroup / kVec), 0, int32_t(batch));
        ptx::bulk_commit_group();
      }
      continue;  // (kTmaStore: a persistent kernel)
    }
    __syncthreads();

    // Write the transposed tile: qt row (column c of x) gets this tile's 128 rows, 16 B per thread.
    constexpr int kChunksPerRow = kGroup / kChunk;                 // 8
    constexpr int kRowsPerStep = kThreads / kChunksPerRow;         // 32 or 64
    const int chunk = threadIdx.x % kChunksPerRow;
    const int64_t m = int64_t(rt) * kGroup + chunk * kChunk;       // x row of the chunk's first byte
    // Bytes of the chunk to write: x's rows, then zeros up to rows_out (rows past x's are zeros in
    // the tile). kAlignedT (rows_out % 16 == 0): 0 or all 16.
    const int m_valid = m >= rows_out ? 0 : (rows_out - m >= kChunk ? kChunk : int(rows_out - m));
#pragma unroll
    for (int step = 0; step < kGroup / kRowsPerStep; ++step) {
      const int c = step * kRowsPerStep + threadIdx.x / kChunksPerRow;
      const int64_t col_c = int64_t(ct) * kGroup + c;
      if (col_c >= cols || m_valid == 0) continue;
      const uint4 bytes = *reinterpret_cast<const uint4*>(&tile_t[t_offset<kTmaStore>(c, chunk * kChunk)]);
      uint8_t* dst = qt + (batch * cols + col_c) * rows_out + m;
      store_bytes<kChunk, kAlignedT>(dst, reinterpret_cast<const uint8_t*>(&bytes), m_valid);
    }
    if constexpr (!kPrefetch) break;  // a CTA per tile (launch): no loop state kept live
  }
  if (kTmaStore && threadIdx.x == 0) ptx::bulk_wait_group<0>();  // smem stays until the last store is done
}

// qt [batch][cols][rows_out] as a 4D tensor, innermost first: rows_out (contiguous), cols / 8
// (stride 8 rows_out), 8 (stride rows_out), batch (stride cols rows_out). Its box 128 x 16 x 8 x 1
// is one tile's 128 columns with column c in row (c % 8) * 16 + c / 8, t_offset<true>'s order. Needs
// cols % 8 == 0 and rows_out % 16 == 0 (16-byte strides).
bool qt_tensor_map(CUtensorMap* map, const void* qt, int64_t batch, int64_t cols, int64_t rows_out) {
  const cuuint64_t dims[4] = {cuuint64_t(rows_out), cuuint64_t(cols / kVec), kVec, cuuint64_t(batch)};
  const cuuint64_t strides[3] = {cuuint64_t(kVec * rows_out), cuuint64_t(rows_out), cuuint64_t(cols * rows_out)};
  const cuuint32_t box[4] = {kGroup, kGroup / kVec, kVec, 1};
  return encode_tensor_map(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, qt, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_NONE);
}

// Their dynamic shared memory: the two prefetch stages.
template <Act kAct>
constexpr int prefetch_bytes() {
  constexpr int kRows = rows_per_thread<kAct>();
  return 2 * (kAct == Act::kGeluGrad ? 2 : 1) * kRows * threads_for<kRows>() * kChunk;
}

// CTAs of the persistent grid of kernel <T, aligned_in = true, kAlignedT, kBlockwise, kAct> on the
// current device: resident CTAs per SM x SMs, queried once per kernel and device (0 on error).
template <typename T, bool kAlignedT, bool kBlockwise, Act kAct>
int persistent_ctas() {
  constexpr int kMaxDevices = 64;
  static int cached[kMaxDevices] = {};  // benign race: concurrent first calls store the same value
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return 0;
  if (cached[dev] == 0) {
    const auto kernel = quantize_transpose_kernel<T, true, kAlignedT, kBlockwise, kAct>;
    constexpr int kThreads = threads_for<rows_per_thread<kAct>()>(), kSmem = prefetch_bytes<kAct>();
    int sms = 0, per_sm = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, kSmem) != cudaSuccess)
      return 0;
    cached[dev] = sms * per_sm;
  }
  return cached[dev];
}

template <typename T, bool kBlockwise, Act kAct>
cudaError_t launch(const void* x, const void* u, const TransposeExtents& e, bool pow2, void* q, float* s, void* qt,
                   float* st, cudaStream_t stream) {
  const int64_t batch = e.batch, rows = e.rows, cols = e.cols;
  const int64_t tiles = batch * ((rows + kGroup - 1) / kGroup) * ((cols + kGroup - 1) / kGroup);
  constexpr int kThreads = threads_for<rows_per_thread<kAct>()>();
  if (tiles == 0) return cudaSuccess;
  if (tiles > 0x7FFFFFFF) return cudaErrorInvalidValue;
  // Vector paths: x rows start 16-byte aligned (cols % 8 == 0; q's then 8-byte aligned: padding_ok),
  // qt rows 16-byte aligned (rows_out % 16 == 0); buffers come 16-byte aligned from XLA.
  const bool aligned_in = cols % kVec == 0, aligned_t = e.rows_out % kChunk == 0;
  auto kernel = aligned_in
      ? (aligned_t ? quantize_transpose_kernel<T, true, true, kBlockwise, kAct>
                   : quantize_transpose_kernel<T, true, false, kBlockwise, kAct>)
      : (aligned_t ? quantize_transpose_kernel<T, false, true, kBlockwise, kAct>
                   : quantize_transpose_kernel<T, false, false, kBlockwise, kAct>);
  CUtensorMap qt_map{};  // unused by the other kernels
  if (stores_qt_by_tma<T, kAct>(aligned_in, aligned_t) && !qt_tensor_map(&qt_map, qt, batch, cols, e.rows_out))
    return cudaErrorInvalidValue;
  // Prefetching kernels: a persistent grid; the others: a CTA per tile.
  int64_t grid = tiles;
  int smem = 0;
  if (prefetches<T, kAct>(aligned_in)) {
    const int ctas = aligned_t ? persistent_ctas<T, true, kBlockwise, kAct>()
                               : persistent_ctas<T, false, kBlockwise, kAct>();
    if (ctas <= 0) return cudaErrorInvalidValue;
    grid = std::min<int64_t>(tiles, ctas);
    smem = prefetch_bytes<kAct>();
  }
  kernel<<<unsigned(grid), kThreads, smem, stream>>>(static_cast<const T*>(x), static_cast<const T*>(u), batch,
                                                     rows, cols, e.rows_out, e.cols_out, pow2,
                                                     static_cast<uint8_t*>(q), s, static_cast<uint8_t*>(qt), st,
                                                     qt_map);
  return cudaGetLastError();
}

template <typename T>
cudaError_t dispatch(bool blockwise, int activation, const void* x, const void* u, const TransposeExtents& e, bool pow2,
                     void* q, float* s, void* qt, float* st, cudaStream_t stream) {
  if (blockwise)
    return activation == 0 ? launch<T, true, Act::kNone>(x, u, e, pow2, q, s, qt, st, stream)
                           : cudaErrorInvalidValue;
  switch (static_cast<Act>(activation)) {
    case Act::kNone: return launch<T, false, Act::kNone>(x, u, e, pow2, q, s, qt, st, stream);
    case Act::kGelu: return launch<T, false, Act::kGelu>(x, u, e, pow2, q, s, qt, st, stream);
    case Act::kGeluGrad:
      return u ? launch<T, false, Act::kGeluGrad>(x, u, e, pow2, q, s, qt, st, stream) : cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_quantize_transpose(const void* x, InDtype dtype, bool blockwise, const TransposeExtents& e,
                                      bool pow2_scale, void* q, float* s, void* qt, float* st,
                                      cudaStream_t stream, int activation, const void* u) {
  // q and s: both, or (blockwise only) neither.
  if ((q == nullptr) != (s == nullptr) || (q == nullptr && !blockwise)) return cudaErrorInvalidValue;
  if (!padding_ok(e.rows, e.rows_out) || !padding_ok(e.cols, e.cols_out)) return cudaErrorInvalidValue;
  switch (dtype) {
    case InDtype::kF32: return dispatch<float>(blockwise, activation, x, u, e, pow2_scale, q, s, qt, st, stream);
    case InDtype::kBF16:
      return dispatch<__nv_bfloat16>(blockwise, activation, x, u, e, pow2_scale, q, s, qt, st, stream);
    case InDtype::kF16: return dispatch<__half>(blockwise, activation, x, u, e, pow2_scale, q, s, qt, st, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace fp8gemm
