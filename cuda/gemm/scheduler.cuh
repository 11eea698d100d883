// Persistent tile schedulers for the sm90 FP8 GEMM kernel.
//
// Contract between a scheduler and the kernel body (fp8_gemm_kernel.cuh):
//   * `typename S::Params` is a trivially copyable struct passed by value as a kernel argument.
//   * `S(params, cluster_size)` is constructed independently by the producer and by every consumer
//     thread; `bool next(TileInfo&, Feed&)` maps the next tile index of the feed (below) to a tile,
//     and must yield the same sequence of tiles in all of them for the same indices (it may only
//     depend on params, the indices and gridDim -- and, for grouped layouts, on device memory that
//     does not change during the kernel). The indices of a CTA increase. A scheduler that declares
//     `static constexpr bool kPostsTiles = true` runs in the producer alone, which posts the tiles
//     to the math threads (below); it names the tile counter of the run-time order, if any
//     (`static int* tile_counter(const Params&)`). The others run the static order in every thread.
//   * With a cluster of 2 (TMA multicast), CTAs blockIdx.x = 2c and 2c+1 form a cluster. In every
//     iteration both CTAs of a cluster must run the same number of k-blocks (they share the stage
//     ring through the empty barriers) and, when `multicast_a` / `multicast_b` is set, work on the
//     same A / B tile.
//     Once a CTA runs out of tiles its peer's `peer_active` must be false from then on.
//
// The TileInfo carries everything the producer, the math warpgroups and the epilogue need, so the
// kernel body is layout-agnostic. Grouped layouts (MoE, GroupedScheduler below) fill `group`,
// `row_end` (end of the group's rows: the epilogue must not write past it) and the group offsets
// of B / SFB. The k-grouped weight-gradient layout (KGroupedWgradScheduler below) also gives every
// tile its own k-block range (kb_begin, kb_end; a scheduler that does declares
// `static constexpr bool kTileKRange = true`, the others run every tile over all k-blocks) and
// reads A at a row (a_row) other than the output row (row_start); it also has k-blocks that two
// groups share (`kMasksSharedBlocks`). The dense scheduler's 64-row tiles take k-ranges too: split-K
// over a cluster (DenseScheduler).
#pragma once

#include <cstdint>

#include "common/sm90_ptx.cuh"
#include "gemm/fp8_gemm.h"

namespace fp8gemm {

struct TileInfo {
  int m_block;     // M-block index inside the current group's tile grid
  int n_block;     // N-block index
  int group;       // group index (0 for dense)
  int row_start;   // first row of D covered by this tile (global row index)
  int row_end;     // rows >= row_end are not part of this tile's output (dense: M)
  int a_row;       // first row of A / SFA for the TMA loads (== row_start except for k-grouped)
  int b_row;       // first row of B for the TMA load (grouped: group * N + n_block * BLOCK_N)
  int col_start;   // first output column (n_block * BLOCK_N)
  int col_end;     // columns >= col_end do not exist (N)
  int sfb_offset;  // offset (in floats) of this group's B-scale matrix inside `sfb` (dense: 0)
  bool multicast_a;  // the peer CTA of the cluster works on the same A tile (and A-scale slice):
                     // loaded once by cluster rank 0 and multicast into both CTAs
  bool multicast_b;  // the same for the B tile
  bool peer_active;  // the peer CTA has a tile in this iteration (it consumes our empty-barrier
                     // arrivals); always false without clusters
  bool wide;         // grouped 256-row tiles: the group's last M-block has <= 128 rows, and this
                     // tile covers them over two N-blocks (n_block, n_block + 1): see GroupedScheduler
  int kb_begin;    // k-blocks [kb_begin, kb_end) of this tile: only read when the scheduler has
  int kb_end;      // kTileKRange (k-grouped, dense split-K); may be empty (the tile's output is then zero)
  int tok_begin;   // kTileKRange: the tile's tokens (K indices) [tok_begin, tok_end); the k-blocks at
  int tok_end;     // either end may hold other tokens, which the producer's masking warps zero
};

// ------------------------------------------------------------------------------------------------
// Tile feeds: where a CTA's tile indices come from. A scheduler maps each index to a tile; every
// call of its next(tile, feed) takes one index from `feed` (an index past the last tile ends the
// CTA's work), so the threads of a CTA that run schedulers must draw from feeds that give one
// sequence.
//
// Static order (StaticTiles; every scheduler): tile t on CTA t % gridDim.x, iteration
// t / gridDim.x.
//
// Run-time order (the grouped layouts, when the launch gives a tile counter): the tiles are handed
// out in index order as CTAs become free. In the static order, when tiles take unequal time -- the
// partial last tile of an unpadded group computes only the 64-row waves that hold rows -- the CTAs
// drift apart in tile index over the kernel, the tiles in flight spread over more groups than the
// L2 holds B for, and B streams from DRAM once per M-tile instead of once (256 groups x ~1024 rows:
// half speed; RESULTS.md, session 17). Handed out at run time, the ~gridDim.x tiles in flight stay
// consecutive whatever each one costs. Per CTA one thread, the TMA producer, takes the indices
// (TilePoster): its first is blockIdx.x, the next ones gridDim.x + atomicAdd(counter, 1). The
// indices of a CTA increase, as in the static order (the grouped scheduler's forward-only cursor
// relies on that).
//
// Posted tiles (schedulers that declare kPostsTiles: the grouped 256-row tile, in either order, the
// dense one up to a K and every k-grouped wgrad tile, in the static order):
// after its first tile, a CTA's tiles are decoded by the producer alone. It posts each one (and, at
// the end, "no tile") into a ring of kSlots slots in shared memory, from which every math thread
// copies it (TileReader): full / empty mbarrier per slot as in the stage ring (full: the poster's
// one arrival; empty: the readers' arrivals, TileReader). The math warpgroups
// then hold no scheduler state next to their two output arrays and run no cursor code between
// tiles: their "next tile" step took 525 ns, now 284 (4 x 8192 N7168 K2048: +1.3%; RESULTS.md,
// session 38). The first tile, index blockIdx.x in either order, the math threads decode
// themselves (kernel: MathTiles::first): handed over, it delayed the start of the one-tile CTAs of
// masked decode shapes (-0.8 to -1.8%).
// ------------------------------------------------------------------------------------------------
struct StaticTiles {
  int taken = 0;
  __device__ __forceinline__ int next() { return static_cast<int>(blockIdx.x + (taken++) * gridDim.x); }
};

struct TileRing {
  static constexpr int kSlots = 4;
  uint64_t full[kSlots];
  uint64_t empty[kSlots];
  // What the math warpgroups need of a posted tile that they cannot derive from the kernel's
  // parameters (a posted tile has a_row = row_start and col_end = Params::n: TileReader); the other
  // TileInfo fields are the producer's. flags: bit 0 wide, bit 1 peer_active, bit 2 a tile (0: the
  // CTA's work is done). (A value loaded from shared memory cannot be rematerialized the way a
  // kernel parameter can, so the slot holds no field the math threads can compute.)
  // a_row, kb_begin, kb_end: read by the k-grouped wgrad's readers only (TileReader<.., true>).
  struct Slot {
    int row_start, row_end, col_start, sfb_offset, flags;
    int a_row, kb_begin, kb_end;
  };
  Slot slots[kSlots];

  // By one thread, before the CTA's first barrier (like the stage ring's barriers). A slot is
  // released by `releases` arrivals (TileReader: one per reading warp or thread).
  __device__ __forceinline__ void init(uint32_t releases) {
    for (int s = 0; s < kSlots; ++s) {
      ptx::mbar_init(&full[s], 1);
      ptx::mbar_init(&empty[s], releases);
    }
  }
  __device__ __forceinline__ static int slot(int n) { return n % kSlots; }
  __device__ __forceinline__ static uint32_t parity(int n) { return static_cast<uint32_t>(n / kSlots) & 1u; }
};

// The producer's feed: the static order without a counter, else the run-time order. post() hands a
// decoded tile to the math threads (posted tiles only).
class TilePoster {
 public:
  __device__ __forceinline__ TilePoster(TileRing* ring, int* counter) : ring_(ring), counter_(counter) {}

  __device__ __forceinline__ int next() {
    const int n = taken_++;
    if (counter_ == nullptr) return static_cast<int>(blockIdx.x + n * gridDim.x);
    return n == 0 ? static_cast<int>(blockIdx.x) : static_cast<int>(gridDim.x) + reserved_;
  }

  // Posts the tile the scheduler decoded from the last index (has_tile false: no tile, the end),
  // except the CTA's first, index blockIdx.x in either order, which the math threads decode
  // themselves (MathTiles::first in the kernel): it is on their critical path at the start.
  __device__ __forceinline__ void post(const TileInfo& tile, bool has_tile) {
    if (taken_ > 1) {
      const int n = taken_ - 2;  // posts so far: one per index taken, the first index's excepted
      ptx::mbar_wait(&ring_->empty[TileRing::slot(n)], TileRing::parity(n) ^ 1u);  // first pass: at once
      TileRing::Slot& slot = ring_->slots[TileRing::slot(n)];
      if (has_tile) {
        slot.row_start = tile.row_start, slot.row_end = tile.row_end;
        slot.col_start = tile.col_start, slot.sfb_offset = tile.sfb_offset;
        slot.a_row = tile.a_row, slot.kb_begin = tile.kb_begin, slot.kb_end = tile.kb_end;
      }
      slot.flags = has_tile ? (4 | (tile.peer_active ? 2 : 0) | (tile.wide ? 1 : 0)) : 0;
      ptx::mbar_arrive(&ring_->full[TileRing::slot(n)]);  // release: the tile is visible to the readers
    }
    // The next index is taken now, one tile ahead, and after the (release) arrive: under full TMA
    // load an atomic's round trip to the L2 takes microseconds, and a release waits for the
    // thread's earlier memory operations (so the stages' arrivals are relaxed: sm90_ptx.cuh). The
    // tiles in flight stay consecutive: each CTA takes its next index as it starts a tile, so the
    // tiles computed at any time are about gridDim.x indices taken in a row.
    if (counter_ != nullptr && has_tile) reserved_ = atomicAdd(counter_, 1);
  }

 private:
  TileRing* ring_;
  int* counter_;
  int taken_ = 0;
  int reserved_ = -1;
};

// The math threads' tiles when the producer posts them, after the first (TilePoster::post); called
// by whole warps. A slot is released (release: the reads are done before it is reused)
//   kPerThread false: by one arrival per warp, lane 0's after a __syncwarp. Against one per thread
//     (256 on one barrier), the grouped 256-row tile: +0.1-0.5% on six of the eight contiguous
//     cases (package, H200; RESULTS.md, sessions 37 and 53). compute-sanitizer's racecheck does
//     not see the order the __syncwarp gives and reports the slot's next write as a hazard once the
//     ring wraps (more tiles per CTA than kSlots; session 52).
//   kPerThread true: by every thread (the dense 256-row tile: no slower there; racecheck-clean).
//   kTileKRange: the tile's own k-range and A row (the k-grouped wgrad) are read too; the other
//     posted tiles run all k-blocks and read A at row_start.
template <bool kPerThread, bool kTileKRange = false>
class TileReader {
 public:
  __device__ __forceinline__ TileReader(TileRing* ring, int n) : ring_(ring), n_(n) {}

  __device__ __forceinline__ bool next(TileInfo& tile) {
    const int n = taken_++;
    ptx::mbar_wait(&ring_->full[TileRing::slot(n)], TileRing::parity(n));
    const TileRing::Slot& slot = ring_->slots[TileRing::slot(n)];
    const int flags = slot.flags;
    const bool has_tile = (flags & 4) != 0;
    if (has_tile) {
      tile = TileInfo{};
      tile.row_start = tile.a_row = slot.row_start, tile.row_end = slot.row_end;
      tile.col_start = slot.col_start, tile.col_end = n_, tile.sfb_offset = slot.sfb_offset;
      tile.wide = (flags & 1) != 0, tile.peer_active = (flags & 2) != 0;
      if constexpr (kTileKRange) tile.a_row = slot.a_row, tile.kb_begin = slot.kb_begin, tile.kb_end = slot.kb_end;
    }
    if constexpr (kPerThread) {
      ptx::mbar_arrive(&ring_->empty[TileRing::slot(n)]);
    } else {
      __syncwarp();
      if (ptx::lane_id() == 0) ptx::mbar_arrive(&ring_->empty[TileRing::slot(n)]);
    }
    return has_tile;
  }

 private:
  TileRing* ring_;
  int n_;  // N: every posted tile's col_end
  int taken_ = 0;
};

// Division by a divisor fixed for the kernel, as a multiply-high and a shift (Granlund-Montgomery):
// a scheduler's next() runs once per tile on the path between two tiles' math, where two runtime
// integer divisions (~20 dependent instructions each, through the uniform datapath) cost ~0.3 us
// (tools/timeline.sh). Set up on the host (the launcher fills the schedulers' BandedOrder): set up
// in the kernel, the 64-bit divisions delayed every CTA's first load by ~0.6 us (RESULTS.md,
// session 22). Quotients of 0 <= n < 2^31.
struct FastDiv {
  uint32_t divisor = 1, multiplier = 0, shift = 0;  // divisor 1: multiplier 0 (quotient = n)
  FastDiv() = default;
  __host__ __device__ explicit FastDiv(int d) : divisor(static_cast<uint32_t>(d)) {
    if (divisor > 1) {
      uint32_t log2_ceil = 0;  // ceil(log2(d))
      while ((1ull << log2_ceil) < divisor) ++log2_ceil;
      const uint32_t p = 31u + log2_ceil;  // m = ceil(2^p / d) < 2^32
      multiplier = static_cast<uint32_t>(((1ull << p) + divisor - 1) / divisor);
      shift = p - 32u;
    }
  }
  __device__ __forceinline__ int div(int n) const {
    return divisor > 1 ? static_cast<int>(__umulhi(static_cast<uint32_t>(n), multiplier) >> shift) : n;
  }
};

// Block coordinates of tile `index` of a num_banded x num_other grid walked band by band, `band`
// blocks of the banded axis per band, the banded axis fastest inside a band (the order is explained
// at DenseScheduler, which also splits odd bands for CTA pairs). The dense and grouped schedulers
// use it (inside a group for the grouped one, whose num_banded varies from group to group); both
// divisions are by divisors fixed for the kernel except in a last, shorter band.
struct BandedPosition {
  int banded, other;
};
// The plain division, for schedulers whose state must stay small (below).
struct PlainDiv {
  int divisor = 1;
  PlainDiv() = default;
  __device__ __forceinline__ explicit PlainDiv(int d) : divisor(d) {}
  __device__ __forceinline__ int div(int n) const { return n / divisor; }
};
template <class Div>
struct BandedOrderWith {
  int band, num_other;
  Div per_band;  // band * num_other tiles per band
  Div in_band;   // band
  BandedOrderWith() = default;
  __host__ __device__ BandedOrderWith(int band_, int num_other_)
      : band(band_), num_other(num_other_), per_band(band_ * num_other_), in_band(band_) {}
  // Position of `index` in a band of `rows` blocks (rows <= band) that starts at block `first`.
  __device__ __forceinline__ BandedPosition in_band_position(int index_in_band, int first, int rows) const {
    const int other = rows == band ? in_band.div(index_in_band) : index_in_band / rows;
    return {first + index_in_band - other * rows, other};
  }
  __device__ __forceinline__ BandedPosition position(int index, int num_banded) const {
    const int b = per_band.div(index);
    const int first = b * band;
    return in_band_position(index - b * (band * num_other), first, min(band, num_banded - first));
  }
};
using BandedOrder = BandedOrderWith<FastDiv>;

// Dense GEMM: tiles of BLOCK_M x BLOCK_N over [M, N], walked in an L2-friendly order.
//
// Order: the blocks of the "banded" axis (M by default, N with `band_on_n`) are cut into bands of
// `band` blocks. Bands are processed one after the other; inside a band the tile index runs over
// the banded axis fastest, then over the other one:
//     tile -> b = tile / (band * num_other_blocks), in_band = tile % (band * num_other_blocks)
//             banded block = b * band + in_band % rows_in_band, other block = in_band / rows_in_band
// so the ~num_SMs tiles in flight at any time touch only `band` row-blocks of one operand and about
// num_SMs / band of the other, which stay L2 resident while they are reused.
//
// Dense GEMMs run the static order: tile t on CTA t % gridDim.x in iteration t / gridDim.x. With
// clusters of 2 (gridDim even), CTAs 2c and 2c+1 get tiles t and t^1: with an even band height
// these are adjacent tiles along the banded axis that share the other operand's tile, which is
// loaded once and multicast: B (same N-block) when M is banded, A (same M-block) when N is banded.
// If the last band has an odd height it is split into an even band and a band of height 1 (no
// multicast there).
//
// Split-K (k_splits = S > 1, the split-K tiles of fp8_gemm.h: decode GEMMs with fewer tiles than
// SMs): the grid is S CTAs per tile, each cluster of S CTAs (blockIdx.x = S c .. S c + S - 1) one
// tile, rank r over k-blocks [r Kb / S, (r + 1) Kb / S). The ranks add their partial tiles through
// distributed shared memory (split_k.cuh). The tile index is then the CTA's index over S.
//
// Halved tail (tail_tiles = r > 0, 256-row tiles): the static order gives the last r tiles (r <=
// grid / 2) to CTAs 0..r-1 alone, a whole tile's time while the other CTAs idle. Each of them runs
// instead as two 128-row halves on 2r CTAs, which take the kernel's one-wave path (one 64-row wave
// per math warpgroup; the two-wave kernel skips the empty one): the last wave costs about half a
// tile. Index F + j (F = tiles - r, a multiple of the grid) is half j % 2 of tile F + j / 2; with
// pairs, half (j / 2) % 2 of tile F + 2 (j / 4) + j % 2, so that a pair's two CTAs (j, j ^ 1) hold
// the same half of tiles t and t ^ 1 and still share their operand. The launcher sets it where
// every half has rows (M % 256 == 0 or > 128) and pairs stay whole (r even).
struct DenseSchedulerParams {
  int m, n;
  int k_splits = 1;      // CTAs (a cluster) per tile, each over its share of the k-blocks
  int num_k_blocks = 0;  // cdiv(K, 128)
  int band_on_n = 0;  // 0: bands of M-blocks (pairs share B); 1: bands of N-blocks (pairs share A)
  // BandedOrder(blocks per band, blocks along the other axis), set up by the launcher; the band is
  // >= 1, even when clusters of 2 are used.
  BandedOrder order;
  int tail_tiles = 0;  // the last tiles, each run as two 128-row halves (above); 0: none
};

// Short K (kMaxKBlocksArg > 0): the launcher picks this scheduler only when num_k_blocks is at most
// kMaxKBlocks; the kernel then compiles its k-loop as straight-line code per k-block count, for
// the kShortKTwinSpan counts up to kMaxKBlocks (1-4, 5-8, 9-12, 13-16). The launcher takes the
// first twin that fits, so smaller counts run on an earlier twin; compiling every count from 1 made
// the twins' object 15x larger (7.7 MB) and gave ptxas a 1.2 KB stack frame in the third twin
// (session 50).
constexpr int kShortKTwinSpan = 4;
//
// Posted tiles (kPostTiles; the 256-row tile up to a K: FP8GEMM_POSTED_LOOP_TILES in fp8_gemm_kernel.cuh):
// only the producer runs this scheduler past a CTA's first tile and posts each tile to the math
// warpgroups (TileRing), so that its divisions and its tail and band logic (~60 uniform
// instructions per math warp) leave the math warps' way between two tiles.
template <int BLOCK_M, int BLOCK_N, int kMaxKBlocksArg = 0, bool kPostTiles = false>
struct DenseScheduler {
  using Params = DenseSchedulerParams;  // not templated: one host-side launch signature for all tiles
  static constexpr bool kPostsTiles = kPostTiles;
  static constexpr bool kSlotReleasePerThread = true;  // TileReader
  static_assert(!kPostTiles || BLOCK_M == 256, "posted dense tiles: the 256-row tile only");
  // The run-time order's tile counter (TilePoster): none, posted dense tiles take the static order.
  __device__ static int* tile_counter(const Params&) { return nullptr; }
  // The 64-row tiles and the split-K tiles read their k-range from the tile (split-K); the others run
  // all of K, as do the 64-row tiles that straddle B-scale blocks (64x192: their staged B scales
  // assume the whole K).
  static constexpr bool kTileKRange = (BLOCK_M == 64 && 128 % BLOCK_N == 0) || is_split_k_tile(BLOCK_M, BLOCK_N);
  // Every tile has at most this many k-blocks (0: no bound known at compile time).
  static constexpr int kMaxKBlocks = kMaxKBlocksArg;
  static_assert(kMaxKBlocks == 0 || !kTileKRange, "short-K kernels run all of K per tile");
  static_assert(kMaxKBlocks % kShortKTwinSpan == 0, "a short-K twin covers whole spans of k-block counts");

  int num_m_blocks, num_n_blocks, num_tiles;
  int num_indices;            // tile indices the feed may give: num_tiles, times k_splits with split-K
  int num_banded, num_other;  // blocks along the banded axis and along the other one
  bool paired;       // clusters of 2 (multicast-capable)
  Params p;          // p.order: the tile order, set up by the launcher

  __device__ __forceinline__ DenseScheduler(const Params& params, uint32_t cluster_size) : p(params) {
    num_m_blocks = (params.m + BLOCK_M - 1) / BLOCK_M;
    num_n_blocks = (params.n + BLOCK_N - 1) / BLOCK_N;
    num_tiles = num_m_blocks * num_n_blocks;
    num_indices = kTileKRange && params.k_splits > 1 ? num_tiles * params.k_splits : num_tiles;
    if constexpr (BLOCK_M == 256) num_indices += params.tail_tiles;  // one more index per halved tile
    num_banded = params.band_on_n ? num_n_blocks : num_m_blocks;
    num_other = params.band_on_n ? num_m_blocks : num_n_blocks;
    paired = cluster_size == 2 && params.k_splits == 1;
  }

  template <class Feed>
  __device__ __forceinline__ bool next(TileInfo& t, Feed& feed) {
    int tile = feed.next();
    // The end first: a decode CTA's last call (its one tile done) then costs no divisions.
    if (tile >= num_indices) return false;
    t.kb_begin = 0, t.kb_end = p.num_k_blocks;
    if (kTileKRange && p.k_splits > 1) {  // this CTA's share of K: its rank in the cluster
      const int split = tile % p.k_splits;
      tile /= p.k_splits;
      t.kb_begin = split * p.num_k_blocks / p.k_splits;
      t.kb_end = (split + 1) * p.num_k_blocks / p.k_splits;
    }

    // A halved tail tile: which tile, and which 128-row half of it (-1: a whole tile).
    int half = -1;
    if constexpr (BLOCK_M == 256) {
      const int first_tail = num_tiles - p.tail_tiles;
      if (p.tail_tiles > 0 && tile >= first_tail) {
        const int j = tile - first_tail;
        half = paired ? (j >> 1) & 1 : j & 1;
        tile = paired ? first_tail + (j >> 2) * 2 + (j & 1) : first_tail + (j >> 1);
      }
    }

    const int band = p.order.band;
    const int b = p.order.per_band.div(tile);
    int first = b * band;
    int in_band = tile - b * (band * num_other);
    int rows = min(band, num_banded - first);

    // An odd-height (last) band breaks the (t, t^1) pairing: split it into an even part and a
    // 1-high remainder. Both parts have an even number of tiles except possibly the remainder,
    // which is last, so pairs never straddle two bands with different heights.
    if (paired && (rows & 1) && rows > 1) {
      const int even_rows = rows - 1;
      if (in_band < even_rows * num_other) {
        rows = even_rows;
      } else {
        in_band -= even_rows * num_other;
        first += even_rows;
        rows = 1;
      }
    }

    const BandedPosition pos = p.order.in_band_position(in_band, first, rows);
    t.m_block = p.band_on_n ? pos.other : pos.banded;
    t.n_block = p.band_on_n ? pos.banded : pos.other;
    t.group = 0;
    t.wide = false;
    t.row_start = t.m_block * BLOCK_M;
    // 64-row tiles (small M, where a tile's time is its loads): a last M-block that M fills only
    // partly starts lower, at M - 64 rounded up to a multiple of 4 (A's scale box starts 16-byte
    // aligned), so that its A box holds rows that exist instead of up to 63 past M: TMA's zero fill
    // of a box mostly outside the tensor is slow. Its first rows are also the previous M-block's last
    // ones, computed and stored by both tiles alike (the same bits: a row's sum does not depend
    // on the tile).
    if (BLOCK_M == 64 && p.m > BLOCK_M && t.row_start + BLOCK_M > p.m) t.row_start = (p.m - BLOCK_M + 3) & ~3;
    t.row_end = p.m;
    if (BLOCK_M == 256 && half >= 0) {
      t.row_start += half * 128;
      t.row_end = min(p.m, t.row_start + 128);
    }
    t.a_row = t.row_start;
    t.b_row = t.n_block * BLOCK_N;
    t.col_start = t.n_block * BLOCK_N;
    t.col_end = p.n;
    t.sfb_offset = 0;
    // Peer tile t^1 exists -> it lives in the same band (bands hold an even number of tiles, except
    // a final 1-high band where multicast is off anyway).
    t.peer_active = paired && ((tile ^ 1) < num_tiles);
    const bool shared = t.peer_active && rows >= 2;
    t.multicast_a = shared && p.band_on_n;
    t.multicast_b = shared && !p.band_on_n;
    return true;
  }
};

// Grouped GEMMs (MoE), both layouts, the tile list derived on the device from the group sizes.
//
//   contiguous (masked == 0): A [M, K] rows sorted by group; group g owns the next sizes[g] rows
//       (jax.lax.ragged_dot semantics): negative sizes count as 0, a size running past M is cut at
//       M, so group g covers rows [row_g, row_g + rows_g) with row_{g+1} = row_g + rows_g <= M.
//       No alignment of groups: a group's tiles start at its first row (TMA takes any row) and its
//       last tile is partial; its rows past the group end belong to the next group (or lie past M)
//       and are computed but not stored (the epilogue masks rows >= row_end).
//   masked (masked == 1): A [G * Mmax, K]; group g covers rows [g * Mmax, g * Mmax + rows_g) with
//       rows_g = clamp(masked_m[g], 0, Mmax).
// B is [G * N, K] (group g at rows g * N), SFB [G][cdiv(N,128)][cdiv(K,128)], D like A's rows.
//
// Tile order: groups one after the other; inside group g, cdiv(rows_g, BLOCK_M) x num_n_blocks
// tiles (but see wide tiles below) in the dense scheduler's banded order (M fastest inside bands of
// `band` M-blocks). Empty groups have no tiles. The tiles are handed out at run time (256-row tiles
// with tile_counter set: TilePoster) or in the static order; the number of tiles is only known on
// the device, and an index past it ends the CTA's work. The 256-row tile posts its tiles
// (kPostsTiles below): the producer alone runs this scheduler past the first tile. A CTA's tile
// indices increase, so each CTA (each thread running a scheduler) keeps a cursor (group, its first
// tile, its first row, its size) that only moves forward: every group size is read once per
// thread over the whole kernel (O(G + tiles) per CTA, O(1) amortised per tile). The sizes of the
// next 4 groups are prefetched into registers, so that stepping over up to 4 groups between two
// tiles of a CTA (small groups: fewer tiles per group than CTAs) costs no dependent global-memory
// round trip.
// Wide tiles (wide_partial, 256-row tiles): a group's last M-block with <= 128 rows would run
// num_n_blocks one-wave tiles, each loading a whole B tile for half the rows (~2/3 of a full tile's
// time for half its work). Instead it runs cdiv(num_n_blocks, 2) wide tiles, after the group's
// other tiles: 128 rows x two N-blocks, where the second 64-row wave of each math warpgroup
// computes the same rows against the next N-block. Same loads and math as a full tile.
// No clusters: multicast is not supported for grouped layouts (peer_active = multicast_a = multicast_b = false).
struct GroupedSchedulerParams {
  const int* sizes;      // device int32 [num_groups]: contiguous group sizes, or masked_m
  int* tile_counter;     // device int32, 0 at launch: tiles handed out at run time; null: static order
  int num_groups;
  int m;                 // contiguous: total rows M; masked: Mmax (rows per group)
  int n;
  int masked;            // 0: contiguous layout, 1: masked layout
  int sfb_group_stride;  // floats per group in SFB: cdiv(N,128) * cdiv(K,128)
  int wide_partial = 0;  // 1: a last M-block of <= 128 rows runs as wide tiles (256-row tiles only)
  BandedOrder order;     // BandedOrder(M-blocks per band inside a group (>= 1), N-blocks), set up by the launcher
};

template <int BLOCK_M, int BLOCK_N>
struct GroupedScheduler {
  using Params = GroupedSchedulerParams;
  // 256-row tiles: the producer decodes the tiles and posts them (TilePoster), in the run-time order
  // with Params::tile_counter. The math warpgroups of this tile hold two output arrays and sit at
  // their register limit. The 128- and 64-row tiles (the static order) run the scheduler in every
  // thread: posted, the f32 64x128 kernel spilled 20 bytes.
  static constexpr bool kPostsTiles = BLOCK_M == 256;
  static constexpr bool kSlotReleasePerThread = false;  // TileReader
  // The run-time order's tile counter (TilePoster; null: the static order).
  __device__ static int* tile_counter(const Params& params) { return params.tile_counter; }

  Params p;  // p.order: the tile order inside a group
  int num_n_blocks;
  // Cursor: the group that contains (or precedes) this CTA's next tile.
  int group;             // == p.num_groups: past the last group
  int group_first_tile;  // index of the group's first tile
  int group_row;         // first row of the group (in A / SFA / D)
  int group_rows;        // clamped number of rows of the group
  int group_m_blocks;    // M-blocks of the group that run as ordinary tiles
  bool group_wide;       // its last M-block (<= 128 rows) runs as cdiv(N-blocks, 2) wide tiles
  int ahead0, ahead1, ahead2, ahead3;  // sizes[group + 1 .. group + 4] as stored (0 past the end)

  __device__ __forceinline__ GroupedScheduler(const Params& params, uint32_t /*cluster_size*/) : p(params) {
    num_n_blocks = (params.n + BLOCK_N - 1) / BLOCK_N;
    group_first_tile = 0;
    const int first = load_size(0);
    ahead0 = load_size(1), ahead1 = load_size(2), ahead2 = load_size(3), ahead3 = load_size(4);
    enter(0, 0, first);
  }

  __device__ __forceinline__ int load_size(int g) const { return g < p.num_groups ? __ldg(p.sizes + g) : 0; }

  // The rows of D that no tile writes, set to zero by the kernel's otherwise idle producer warps
  // (kZeroesUnwrittenRows), so no separate kernel runs before the GEMM: contiguous, rows
  // [min(sum of sizes, M), M); masked, rows [rows_g, Mmax) of every group g. Called by whole warps
  // (`warp` of `num_warps` per CTA); the work is spread over every CTA's warps in 16-byte stores
  // (row_bytes % 16 == 0). The sizes are read 32 at a time (one per lane) and broadcast.
  static constexpr bool kZeroesUnwrittenRows = true;
  __device__ static void zero_unwritten_rows(const Params& p, void* d, long long row_bytes, int warp, int num_warps) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    const long long row_chunks = row_bytes / 16;
    const long long first = (static_cast<long long>(blockIdx.x) * num_warps + warp) * 32 + lane;
    const long long step = static_cast<long long>(gridDim.x) * num_warps * 32;
    uint4* const out = static_cast<uint4*>(d);
    auto zero = [&](long long begin_row, long long end_row) {  // rows [begin_row, end_row) of D
      for (long long i = begin_row * row_chunks + first; i < end_row * row_chunks; i += step)
        out[i] = make_uint4(0u, 0u, 0u, 0u);
    };
    if (p.masked) {
      for (int g0 = 0; g0 < p.num_groups; g0 += 32) {
        const int mine = g0 + lane < p.num_groups ? __ldg(p.sizes + g0 + lane) : 0;
        const int count = min(32, p.num_groups - g0);
        for (int j = 0; j < count; ++j) {
          const int rows = min(max(__shfl_sync(0xffffffffu, mine, j), 0), p.m);
          const long long group_row = static_cast<long long>(g0 + j) * p.m;
          zero(group_row + rows, group_row + p.m);
        }
      }
    } else {
      long long total = 0;  // in 64 bits: int32 sizes may sum past 2^31
      for (int g = lane; g < p.num_groups; g += 32) total += max(__ldg(p.sizes + g), 0);
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);
      zero(min(total, static_cast<long long>(p.m)), p.m);
    }
  }

  // Makes group g (starting at `row`, stored size `raw_size`) current.
  __device__ __forceinline__ void enter(int g, int row, int raw_size) {
    group = g;
    group_row = row;
    const int limit = p.masked ? p.m : p.m - row;  // rows the group may have (contiguous: up to M)
    group_rows = min(max(raw_size, 0), limit);
    group_m_blocks = (group_rows + BLOCK_M - 1) / BLOCK_M;
    group_wide = BLOCK_M == 256 && p.wide_partial && group_rows > 0 && group_rows - (group_m_blocks - 1) * BLOCK_M <= 128;
    if (group_wide) --group_m_blocks;
  }

  __device__ __forceinline__ void advance_group() {
    const int raw = ahead0;
    ahead0 = ahead1, ahead1 = ahead2, ahead2 = ahead3;
    ahead3 = load_size(group + 5);
    enter(group + 1, p.masked ? group_row + p.m : group_row + group_rows, raw);
  }

  template <class Feed>
  __device__ __forceinline__ bool next(TileInfo& t, Feed& feed) {
    const int tile = feed.next();
    // Advance the cursor to the group holding `tile`.
    while (true) {
      if (group >= p.num_groups) return false;
      if (!p.masked && group_row >= p.m) return false;  // every row is taken: the rest is empty
      const int group_tiles = group_m_blocks * num_n_blocks + (group_wide ? (num_n_blocks + 1) / 2 : 0);
      if (tile - group_first_tile < group_tiles) break;
      group_first_tile += group_tiles;
      advance_group();
    }

    const int in_group = tile - group_first_tile;
    if (in_group < group_m_blocks * num_n_blocks) {
      const BandedPosition pos = p.order.position(in_group, group_m_blocks);
      t.m_block = pos.banded;
      t.n_block = pos.other;
      t.wide = false;
    } else {  // the wide tiles of the last M-block, after the others
      t.m_block = group_m_blocks;
      t.n_block = 2 * (in_group - group_m_blocks * num_n_blocks);
      t.wide = t.n_block + 1 < num_n_blocks;  // an odd last N-block runs as an ordinary one-wave tile
    }
    t.group = group;
    t.row_start = group_row + t.m_block * BLOCK_M;
    t.row_end = group_row + group_rows;
    t.a_row = t.row_start;
    t.b_row = group * p.n + t.n_block * BLOCK_N;
    t.col_start = t.n_block * BLOCK_N;
    t.col_end = p.n;
    t.sfb_offset = group * p.sfb_group_stride;
    t.multicast_a = t.multicast_b = false;
    t.peer_active = false;
    return true;
  }
};

// k-grouped weight gradient: out[g] = A[:, tokens of g] @ B[:, tokens of g]^T, g < G.
//
// A [M, T] and B [N, T] (T = tokens, the contracted axis; K of the kernel), D [G, M, N] viewed as
// [G * M, N]. Group g owns the tokens [s_g, e_g) of the original layout (no padding): the sizes
// are clamped as reference.clamp_group_sizes does (negative -> 0, cut at T), s_g = e_{g-1}. Its
// k-blocks are [s_g / 128, cdiv(e_g, 128)), empty for an empty group. A group that starts or ends
// inside a 128-token block shares that block with its neighbour: the producer warpgroup's masking
// warps zero the other group's tokens of the smaller operand (B, or A where BLOCK_M <= BLOCK_N) in
// shared memory before the block's wgmmas (see the kernel), so each block's products are exactly
// those of the group's tokens, with the block's scales (what a layout padded per group would
// compute; no relayout pass).
//
// Every group has the same output tile grid num_m_blocks x num_n_blocks, so tile t belongs to group
// t / tiles_per_group with no search; inside a group the dense scheduler's banded order (M fastest
// in bands of `band` M-blocks), in the static order. The tile's token range needs the
// prefix sum of the sizes: a CTA's tile indices increase, so each scheduler keeps a cursor (group,
// its token range) that only moves forward, reading each group size once over the whole kernel.
// Tiles of an empty group have an empty k-range: the kernel writes their zero output (out[g] is
// all zero), so no separate zero-fill is needed and no group's output is left unwritten.
// A tile's rows: D rows g * M + [m_block * BLOCK_M, +BLOCK_M) (row_end = g * M + M: the epilogue
// must mask rows past it, they belong to group g + 1), A / SFA rows m_block * BLOCK_M (TMA reads
// rows >= M as zeros).
// With clusters of 2 (pairs sharing A; the host requires an even number of N-blocks and sets
// band_on_n) the order inside a group walks bands of N-blocks instead, N fastest, as the dense
// scheduler's: CTAs 2c and 2c+1 get tiles t and t^1, neighbouring N-blocks of one M-block of one
// group (every band and every group has an even number of tiles), so they run the same k-range and
// share A's loads.
struct KGroupedWgradSchedulerParams {
  const int* sizes;  // device int32 [num_groups]: tokens per group (any values; clamped)
  int num_groups;
  int m, n;
  int t;     // tokens T
  int band;  // blocks per band inside a group (>= 1; even with clusters of 2)
  int band_on_n = 0;  // 0: bands of M-blocks; 1: bands of N-blocks (pairs share A)
};

template <int BLOCK_M, int BLOCK_N>
struct KGroupedWgradScheduler {
  using Params = KGroupedWgradSchedulerParams;
  static constexpr bool kTileKRange = true;
  static constexpr bool kMasksSharedBlocks = true;  // the producer warpgroup's masking warps
  // The producer posts the tiles (TilePoster, static order): at MoE-like sizes a tile is a group's
  // few k-blocks, and decoding the next one in the math warpgroups (divisions, and a dependent load
  // of the next group's size) took ~0.5 us of a ~4.3 us tile (tools/timeline.sh, session 65).
  // Every reading thread releases the slot (racecheck-clean, TileReader). Every tile posts: the
  // 256x96 one (scale products on the tensor cores: four accumulator arrays) since its epilogue's
  // masked-row addresses stay off its k-loop (TmaStoreEpilogue::store_rows_masked), without which
  // its math warpgroups spilled 200-436 bytes; 1-3% faster at MoE-like sizes (H100, session 67).
  static constexpr bool kPostsTiles = true;
  static constexpr bool kSlotReleasePerThread = true;
  __device__ static int* tile_counter(const Params&) { return nullptr; }

  // State kept small (the math warpgroups decode their first tile with it, next to their
  // accumulator arrays): the grid quantities are recomputed from the params per tile (a few
  // integer ops).
  Params p;
  int group;      // cursor: the group whose tokens are [group_begin, group_end) (<= the next tile's group)
  int group_begin;
  int group_end;  // both <= T
  bool paired;    // clusters of 2

  __device__ __forceinline__ KGroupedWgradScheduler(const Params& params, uint32_t cluster_size)
      : p(params), paired(cluster_size == 2) {
    group = 0;
    group_begin = 0;
    group_end = end_of(0, 0);
  }

  // End of group g's tokens given its start (clamped to T; 64-bit: a size near INT32_MAX must not
  // overflow the sum).
  __device__ __forceinline__ int end_of(int g, int begin) const {
    if (g >= p.num_groups) return begin;
    const long long size = max(__ldg(p.sizes + g), 0);
    return static_cast<int>(min(static_cast<long long>(begin) + size, static_cast<long long>(p.t)));
  }

  template <class Feed>
  __device__ __forceinline__ bool next(TileInfo& t, Feed& feed) {
    const int num_m_blocks = (p.m + BLOCK_M - 1) / BLOCK_M;
    const int num_n_blocks = (p.n + BLOCK_N - 1) / BLOCK_N;
    const int tiles_per_group = num_m_blocks * num_n_blocks;
    const int tile = feed.next();
    const int num_tiles = tiles_per_group * p.num_groups;  // the host checks this fits int32
    if (tile >= num_tiles) return false;

    const int g = tile / tiles_per_group;
    while (group < g) {
      ++group;
      group_begin = group_end;
      group_end = end_of(group, group_begin);
    }

    const int in_group = tile - g * tiles_per_group;
    // Plain divisions: the fast divisors' six registers made the 256x128 f32 kernel spill 48 bytes
    // more when its math warpgroups ran this scheduler (before its tiles were posted); the
    // producer, which decodes the tiles now, runs ahead of the math.
    const BandedOrderWith<PlainDiv> order(p.band, p.band_on_n ? num_m_blocks : num_n_blocks);
    const BandedPosition pos = order.position(in_group, p.band_on_n ? num_n_blocks : num_m_blocks);
    t.m_block = p.band_on_n ? pos.other : pos.banded;
    t.n_block = p.band_on_n ? pos.banded : pos.other;
    t.group = g;
    t.wide = false;
    t.a_row = t.m_block * BLOCK_M;
    t.row_start = g * p.m + t.a_row;
    t.row_end = g * p.m + p.m;
    t.b_row = t.n_block * BLOCK_N;
    t.col_start = t.n_block * BLOCK_N;
    t.col_end = p.n;
    t.sfb_offset = 0;
    t.peer_active = paired && (tile ^ 1) < num_tiles;  // always: the tile count is even
    t.multicast_a = t.peer_active && p.band_on_n;
    t.multicast_b = false;
    t.tok_begin = group_begin;
    t.tok_end = group_end;
    t.kb_begin = group_begin / 128;
    t.kb_end = group_end > group_begin ? (group_end + 127) / 128 : t.kb_begin;
    return true;
  }
};

}  // namespace fp8gemm
