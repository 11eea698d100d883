"""Per-shape configuration of the dense GEMM kernel, chosen at trace time from an analytic model.

The kernel is persistent: `num_sms` CTAs walk the output tiles. What matters is (1) the number of
waves, cdiv(tiles, num_sms), since a partly filled last wave costs a whole one (less where the
256-row tiles halve it: `halved_tail_tiles`), and (2) the work
per tile (bigger tiles re-read less of A and B). We pick the compiled (block_m, block_n) with the
fewest waves, then the largest tile, as DeepGEMM's heuristic does; the 256x128 tile then runs in
CTA pairs that share A's loads (TMA multicast). Decode shapes (M <= 128) stream B instead: they
split K over clusters where that pays (`_split_k_tile`), else, at M <= 64, take the widest 64-row
tile that leaves enough CTAs (`_decode_block_n`); both fitted to measurements.
COMPILED_TILES must mirror the instantiations in cuda/gemm/fp8_gemm.cu.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional

import jax.numpy as jnp
import numpy as np

from .reference import cdiv

# (block_m, block_n) pairs compiled into the extension: kCompiledTiles in cuda/gemm/fp8_gemm.h.
# block_m 128 = two math warpgroups (throughput); block_m 64 = one (decode, small M).
COMPILED_TILES = ((128, 112), (128, 128), (128, 144), (128, 160), (128, 176), (128, 192), (256, 128),
                  (128, 32), (128, 64), (64, 32), (64, 64), (64, 128), (64, 192))


@dataclasses.dataclass(frozen=True)
class GemmConfig:
    block_m: int
    block_n: int
    num_stages: int  # 0: as many as fit in shared memory
    num_sms: int
    multicast: int  # 1, or 2 = TMA multicast over a cluster of two CTAs
    # With multicast 2, the operand the pair shares: 1 = A (the pair computes neighbouring N-blocks
    # of one M-block), 0 = B (neighbouring M-blocks of one N-block).
    multicast_a: int = 0
    # Dense SPLIT_K_TILES only: CTAs (a cluster) per tile, each over 1 / k_splits of K, their partial
    # tiles added in a fixed order (cuda/gemm/split_k.cuh). 1 (none) to 4 (kMaxKSplits).
    k_splits: int = 1

    def attributes(self) -> dict[str, int]:
        """The FFI attributes every GEMM call takes (the dense one adds k_splits)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "k_splits"}


def deferred_promotion(block_m: int, block_n: int) -> bool:
    """Whether the kernel overlaps promotion with the next k-block's wgmmas for this tile: two
    accumulator arrays and the output must fit the math warpgroups' registers
    (kDeferredPromotion in cuda/gemm/fp8_gemm_kernel.cuh; 256-row tiles always promote serially)."""
    return block_m <= 128 and 3 * block_n // 2 + 40 <= (232 if block_m == 128 else 240)


def _offered(block_m: int, out_dtype) -> bool:
    """256-row forward tiles serve bf16 output only: their f32 variant is compiled but not
    measured yet (is_compiled in cuda/gemm/fp8_gemm.cu refuses it too)."""
    return block_m != 256 or np.dtype(out_dtype) == np.dtype(jnp.bfloat16)


def halved_tail_tiles(m: int, tiles: int, block_m: int, grid: int, paired: bool) -> int:
    """How many of the last tiles a 256-row dense kernel (forward or wgrad) on `grid` CTAs runs as
    two 128-row halves each (DenseSchedulerParams::tail_tiles; set_tile_order in
    cuda/gemm/fp8_gemm.cu decides it alike): a last wave of at most half the grid, where both halves
    of every tile have rows and CTA pairs stay whole. 0: none."""
    tail = tiles % grid if grid > 0 else 0
    last_rows = m % block_m
    if (block_m == 256 and tiles > grid and 0 < 2 * tail <= grid and (last_rows == 0 or last_rows > 128)
            and not (paired and tail % 2)):
        return tail
    return 0


# A halved last wave measured 0.68-0.75 of a whole one (H200, harness, session 48: the saving at
# 4096x32768x512 and 4096x24576x1536, and the dense wgrad 256x96 at 4096x7168x8192): the halves
# still load a whole tile's A and pay a tile's fixed costs.
_HALVED_TAIL_WAVE = 0.7


def _waves(tiles: float, num_sms: int) -> int:
    """Waves of a persistent grid over `tiles` tiles: a partly filled last wave costs a whole one."""
    return math.ceil(tiles / num_sms)


def _dense_waves(m: int, tiles: int, block_m: int, num_sms: int, paired: bool) -> float:
    """Waves of the dense scheduler (forward and wgrad), whose 256-row tiles may halve the last."""
    grid = num_sms // 2 * 2 if paired else num_sms
    if halved_tail_tiles(m, tiles, block_m, grid, paired):
        return tiles // grid + _HALVED_TAIL_WAVE
    return _waves(tiles, grid)


def _cheapest(candidates, num_sms: int) -> GemmConfig:
    """The wave-and-tile cost model shared by every picker. candidates: (block_m, block_n, waves,
    factor) with `waves` those of the (estimated) output tiles (`_waves`, `_dense_waves`) and
    `factor` the relative cost of a tile's main loop (1.0, or more for a loop measured slower per
    tile). Per-tile time ~ bm*bn MACs plus (bm+bn) operand rows loaded per K step (the load term is
    what makes small tiles lose when M is large, and big ones lose when M is tiny); ties go to the
    larger tile."""
    best = None
    for bm, bn, waves, factor in candidates:
        cost = waves * (bm * bn + 64 * (bm + bn)) * factor
        key = (cost, -bm * bn)
        if best is None or key < best[0]:
            best = (key, bm, bn)
    _, bm, bn = best
    return GemmConfig(block_m=bm, block_n=bn, num_stages=0, num_sms=int(num_sms), multicast=1)


# f32 output: the 128-row tiles' measured time per tile relative to the wave model's cost, 128x128 = 1
# (H200, harness, f32 out, medians over eight K = 7168 shapes from 1024x7168 to 8192x8192; RESULTS.md,
# session 46). The f32 staging leaves fewer pipeline stages than bf16 does (112: 5, 128-160: 4, 176 and
# 192: 3), and 128x112 keeps deferred promotion: it ran 0.84-0.97 of the model, the serial-loop tiles
# 0.96-1.13. With these the picks measured within 1% of the best tile on average over that sweep's
# 16 shapes (K = 512-7168), against 2.7% with the bf16 model (up to 9.6% at 4096x24576x7168).
_F32_TILE_FACTOR = {(128, 112): 0.93, (128, 144): 1.02, (128, 160): 1.07, (128, 176): 1.05, (128, 192): 1.04}
# The serial loop (128 x 144..192) with bf16 output: 0.99-1.03x per tile against deferred promotion
# and the 256-row loop (4096x2112x7168, 2048x7168x7168: RESULTS.md, session 15).
_SERIAL_FACTOR = 1.03
# The 256x128 tile from K = 1024 (the loop kernel, in pairs sharing A): 1.05-1.06x the serial 128-row
# tiles per unit of the model at K = 2048 and 7168 (seven shapes of 3-9 waves, without a halved
# tail); 1.0x at K = 512 (the short-K twin, unpaired). Without it, the halved tail made the model
# take 256x128 at 2048x7168, 1024x14336, 3072x6144, ... where the 128-row picks measured 1.6-5%
# faster. With it, 25 bf16 picks of a 448-shape grid changed (M 512-16384, K 512-7168); of the 18
# measured, 13 ran 0.6-6% faster (512 / 1024 x 7168, 3072x5120, 1024x11008x7168, K = 512 at N =
# 2112-18432), 3 within 0.5%, and 2 slower: 1024x11008x1536 2.4%, 512x28672x1536 1.6%. H200,
# harness, RESULTS.md session 48.
_PAIRED_256_FACTOR = 1.05
# ... plus this much over the waves its CTAs run: with few tiles per CTA its fixed costs show
# (relative to the 128-row tiles: 1.05-1.06 from ~6 waves, 1.07-1.11 at 2-4, 1.10-1.14 at one;
# 100 shapes, K = 1024-16384, H200, harness, session 51). Fitted alone those points ask ~0.07; with
# the short-K charges below the best fit over all points was 0.035.
_PAIRED_256_PER_WAVES = 0.035
# bf16 output, short K: per-tile costs that a short main loop exposes, as c / k-blocks.
# - 128x176: 0.4. Against the earlier picks (H200, harness, session 46, its loop unrolled twice):
#   1.03-1.17x at K = 512 (0.99x at 512x11008), 0.93-0.99x at K = 2048, 0.90-0.96x at K = 7168.
# - 128x112, 128x144, 128x160: 0.25. Per unit of the model, against 128x128, 128x112 ran 1.03-1.07 at
#   K = 1024-2048 where the model charged 1.0 (session 50, 36 shapes). These charges and
#   _PAIRED_256_PER_WAVES were fitted on 641 harness timings (sessions 50-51: 225 shapes, M
#   256-6144, K 512-16384); then, on a held-out grid of 1248 shapes (M 288-4608, N 2816-30720,
#   K 832-4608), the 76 picks they change ran 1.2% faster on average (median 0.7%; 47 faster, 21
#   slower; -5.5% .. +9.2%). The losses left are mostly 256x128 picks at M < 1024. The package
#   agrees (flushed): 1088x9728x1664 +8.0%, 1664x9728x832 +9.1%, 1152x10240x896 +6.3%,
#   416x15360x1664 -4.6%. SPEC's shapes keep their picks. (H200, RESULTS.md session 51.)
_BF16_SHORT_K_CHARGE = {(128, 112): 0.25, (128, 144): 0.25, (128, 160): 0.25, (128, 176): 0.4}
# f32 output, short K, as above:
# - 128x192 and 128x176 (3 stages beside their 96 / 88 KB f32 staging): 0.4 (192: 9% slower than
#   128x144 at K = 512, 3.5% slower than 128x160 at K = 1536; H100, session 16).
# - 128x112: 0.6 (1.13-1.15x the model at K = 512, 0.92-0.96x at K = 2048; session 46).
_F32_SHORT_K_CHARGE = {(128, 112): 0.6, (128, 176): 0.4, (128, 192): 0.4}


def _tile_factor(bm: int, bn: int, k: int, out_dtype, waves: float) -> float:
    """Relative cost of a tile's main loop in the wave model (`_cheapest`) over `waves` waves: 1.0,
    or what it measured per tile beyond the model (the serial loop 1.03, 256x128 in pairs 1.05 and
    more over few waves, f32 per-tile factors: above). Short K exposes what a tile pays once
    (epilogue, first loads, fetching its loop's instructions), so some tiles also pay c / k-blocks
    (`_BF16_SHORT_K_CHARGE`, `_F32_SHORT_K_CHARGE`)."""
    serial = not deferred_promotion(bm, bn) and bm != 256
    factor = _SERIAL_FACTOR if serial else 1.0
    if bm == 256 and k >= _SHARE_A_MIN_K:
        factor = _PAIRED_256_FACTOR + _PAIRED_256_PER_WAVES / waves
    if np.dtype(out_dtype) == np.dtype(jnp.float32):
        factor = _F32_TILE_FACTOR.get((bm, bn), factor)
        short_k_charge = _F32_SHORT_K_CHARGE
    else:
        short_k_charge = _BF16_SHORT_K_CHARGE
    return factor * (1.0 + short_k_charge.get((bm, bn), 0.0) / cdiv(k, 128))


# Multicast of A over CTA pairs on the 256x128 tile. The big shapes are bound by data movement:
# the TMA loads and stage barriers alone take 97% of the time at 4096x7168x16384 (RESULTS.md,
# session 18), and a pair sharing its 32 KB A tile per k-block cuts that floor by 24% (634 -> 483
# us). Measured on the whole kernel (H100, harness, two rounds, session 19): +1.0-1.4% at
# 4096x7168x16384 and 8192^3, +0.7% at 4096x4096x7168, +2% at 32768x4096x7168, +1% at
# 32768x7168x2048, 0 at 4096x7168x2048 and 2048x7168x7168, -0.3% at 4096x32768x512 (4 k-blocks).
# Sharing B gains nothing anywhere; the 128-row tiles gain little or lose (128x128 at
# 1024x7168x7168: -2%), so they stay unpaired. The dense wgrad kernel's 256x128 tile (the same
# loop with per-row B scales): +0.9-1.5% at 7168x7168 and 4096x7168 over 8192 tokens, f32 and bf16
# out (sharing B: +0-0.5%). The k-grouped wgrad likewise, where the N-blocks pair up. The grouped
# forward kernels run without clusters. Pairs sharing A there (static order,
# benchmarks/experiments/s39-grouped-pairs-static-order.patch) take the same cycles per CTA as
# unpaired tiles; sessions 37-40 saw them lose up to 14%, but that was the power controller lowering
# the clock while they ran second in each process (RESULTS.md, session 41). With the clock settled
# first they measured -5% (32x256 uneven) to +2.5% (256x1024 even), -1 to -3% at 8x4096 (H200).
_SHARE_A_MIN_K = 1024

# Short K (the forward's 256x128 short-K twins for K <= 512, 1024 and 1536, whose last k-block
# stores wave 0's slice before promoting wave 1): pairs sharing A measured faster than unpaired
# tiles where N is wide (H200, harness, RESULTS.md).
# The first twin (K <= 512):
# - N >= 16384: +1.0-4.9% on all 11 shapes with M <= 4096 (6 held out when the rule was set). At
#   M = 8192, K = 512 is 1.9-3.2% slower, while K <= 384 gained 1.3-4.7% on all 8 shapes held out
#   there (M = 6144-8192, K = 128-384). At M = 16384 the sign flips with N (-3.8% at
#   16384x16384x128, +0.6-1.5% at N = 18432 and 32768). So pairs up to M = 4096 at K = 512, and
#   up to M = 8192 at K <= 384 (sessions 49, 56).
# - N = 10240-15360, K = 256-512: faster on 22 of 26 shapes (+0.3-3.0%), even on 3, -0.9% at
#   2048x11008x512. At K = 128 (one k-block), -0.9% and -4.8% (4096x15360x128, 8192x13824x128):
#   there pairs start at N = 16384 (session 56).
# - N <= 9216: even (-0.8..+1.2% at N = 9216; session 56) or up to 2.8% slower (N <= 7168; session 49).
# The second twin (K = 528-1008): +0.2-4.8% on all 10 shapes with N >= 16384, M = 2048-8192;
# -0.3..+0.8% at N = 7168, 0.2-2.2% slower at N = 4096 (session 50); at N = 10240-14336 +0.5-5.9% on
# all 14 shapes (M = 2048-8192; session 56, harness only). K >= 1024 pairs by the rule above.
_SHORT_K_SHARE_A_MIN_N = 10240
_ONE_K_BLOCK_SHARE_A_MIN_N = 16384  # K <= 128
_SHORT_K_SHARE_A_MAX_M = 4096  # where _SHALLOW_K < K <= _FIRST_TWIN_MAX_K
_SHALLOW_K = 3 * 128
_SHALLOW_K_SHARE_A_MAX_M = 8192  # where K <= _SHALLOW_K
_FIRST_TWIN_MAX_K = 4 * 128  # the first twin's span: kShortKTwinSpan k-blocks (cuda/gemm/scheduler.cuh)


def _short_k_pairs_share_a(m: int, n: int, k: int) -> bool:
    """Whether the short-K twins' pairs sharing A measured faster at this shape (above)."""
    if n < (_ONE_K_BLOCK_SHARE_A_MIN_N if k <= 128 else _SHORT_K_SHARE_A_MIN_N):
        return False
    if k > _FIRST_TWIN_MAX_K:
        return True
    return m <= (_SHALLOW_K_SHARE_A_MAX_M if k <= _SHALLOW_K else _SHORT_K_SHARE_A_MAX_M)


def _pairs_share_a(block_m: int, k: int, num_sms: int) -> bool:
    """Whether a 256-row tile runs in CTA pairs sharing A: where that measured faster (above; the
    wgrad 256x96 tile +1.3% at 8192^2 x 8192, RESULTS.md session 26)."""
    return block_m == 256 and k >= _SHARE_A_MIN_K and num_sms >= 2


def _forward_pairs_share_a(block_m: int, m: int, n: int, k: int, num_sms: int) -> bool:
    """`_pairs_share_a` for the forward GEMM, whose short-K twins also pair up on wide shapes
    (above)."""
    short_k_pairs = block_m == 256 and num_sms >= 2 and _short_k_pairs_share_a(m, n, k)
    return short_k_pairs or _pairs_share_a(block_m, k, num_sms)


def _share_a_on_256_rows(config: GemmConfig, share_a: bool) -> GemmConfig:
    """The configuration in CTA pairs sharing A where `share_a` (a 256-row tile's pairing rule,
    false for other tiles)."""
    if share_a:
        return dataclasses.replace(config, multicast=2, multicast_a=1)
    return config


# Decode (M <= 64, one 64-row M-block): the widest 64-row tile up to 128 columns that still gives
# at least num_sms * (0.29 + rows / 512) tiles, rows = M rounded up to 8 (the rows of A actually
# loaded). These GEMMs stream B; a wider tile reads A fewer times and streams B in longer rows per
# CTA, but too few CTAs cannot pull B fast enough, and the fewer rows A has, the fewer CTAs suffice.
# Measured on an H100 (RESULTS.md, session 21: M in {1, 32, 64}, N from 1024 to 14336, K 2048 and
# 7168, back-to-back calls; `--suite gemm-sweep` measures the same table): within 3.4% of the best
# 64-row tile everywhere, 0.3% on average; the wave model it replaces for these shapes lost up to
# 14% (1x4096x7168: 64x32 17.7 us, 64x64 15.6).
# Then 64x192 replaces 64x128 where its waves hold fewer columns per CTA (a decode tile's time grows
# with its columns) and its tiles still fill >= 70% of the SMs. Measured on an H200 (RESULTS.md,
# session 32): N = 18432 (96 tiles in one wave, against 144 in two) +11% at M = 16 and 64, K = 7168;
# N = 24576 the same or 1% better; 8x8192x2048 (43 tiles on 132 SMs) 25% slower, so not taken there.
_WIDE_DECODE_TILE_N = 192
_DECODE_TILE_N = tuple(sorted(bn for bm, bn in COMPILED_TILES if bm == 64 and bn != _WIDE_DECODE_TILE_N))
_WIDE_DECODE_MIN_FILL = 0.7


def _decode_block_n(m: int, n: int, num_sms: int) -> int:
    rows = cdiv(m, 8) * 8
    enough = num_sms * (0.29 + rows / 512)
    block_n = _DECODE_TILE_N[0]
    for bn in _DECODE_TILE_N:
        if cdiv(n, bn) >= enough:
            block_n = bn
    wide, wide_tiles = _WIDE_DECODE_TILE_N, cdiv(n, _WIDE_DECODE_TILE_N)
    if (block_n == 128 and wide_tiles >= _WIDE_DECODE_MIN_FILL * num_sms
            and cdiv(wide_tiles, num_sms) * wide < cdiv(cdiv(n, 128), num_sms) * 128):
        block_n = wide
    return block_n


# Split-K of the decode tiles (cuda/gemm/split_k.cuh): S CTAs per tile, a cluster, each over 1 / S
# of K, their partials added through distributed shared memory. The tiles: 64x32 / 64x64, and at
# M = 65..128 also 128x32 / 128x64 (one M-block on two math warpgroups: B loaded once per tile, where
# two 64-row M-blocks load it twice). These GEMMs are bound per CTA (by the k-blocks it walks and the
# bytes it loads), not by the chip, and the clusters must all fit at once: not every GPC holds a
# whole number of them (an H200's 132 SMs hold 66 clusters of 2, 39 of 3, 30 of 4; a 33rd cluster of
# 4 runs in a second round, -30%). Deeper splits lose: each rank's exchange costs the owner more
# (64x64 ks6-8 and 64x128 ks5-8 measured slower wherever they fit), and the 64x128 tile's partials
# are 4x the bytes (its splits tie at best). A short k-loop does not win the exchange back (the first
# version lost 30-50% at 1x7168x2048), so splits start at K = 4096. Where no split pays, the tile is
# `_decode_block_n`'s (M <= 64) or the wave model's (M = 65..128).
# - K = 4096-6143: the 64-row tiles, the most CTAs, then the fewest k-blocks per CTA (H200, RESULTS.md,
#   sessions 29-30, `--suite gemm-sweep`, K = 7168: the best configuration or within 2% of it at
#   N = 576 (64x32 ks4, +30% over ks2), 1024 (64x32 ks3, +17%), 1536 (64x64 ks4, +8%), 3072 and 4096
#   (64x64 ks2)). At K = 4096 the 128-row splits lost everywhere (~1 us more fixed cost): 128x2048
#   64x64 ks2 7.83 us / 128x64 ks3 8.13, 72x2112 7.93 / 8.10; on an H100 128x1536 7.55 / 128x64 ks4
#   8.20, 96x3072 64x64 9.15 / 128x64 ks2 9.95, 128x4096 10.52 / 11.57.
# - From K = 6144: a cost per CTA fitted to A/B runs, ~100 ns per k-block plus its A and B bytes at
#   ~120 GB/s (~8.3 ns per KB: 64x32 12 KB, 64x64 16, 128x32 20, 128x64 24), plus ~0.53 us per extra
#   split (the exchange); in KB, k-blocks x (12 + KB per k-block) + 64 x (splits - 1). The least cost
#   wins among the options with at least 3/4 of the most CTAs (an unsplit grid of several waves
#   counts tiles / waves). It agrees with the rule above except at N = 2048-2112, M = 9..64 (64x64 ks3
#   over 64x32 ks2: H100, us, 64x2112 10.42 / 10.61, 16x2112 10.05 / 10.25, 48x2048 10.22 / 10.49,
#   64x2112x16384 17.60 / 17.64) and at M = 65..128, N = 1024-4096. A/B, H200, us, K = 7168 unless
#   noted (RESULTS.md, session 34), the pick first: 96x2112 128x64 ks3 10.32 / 64x64 ks2 10.90 (the
#   earlier pick); 128x2112x16384 16.67 / 19.03; 96x2048x16384 18.1 / 20.0 (H100); 128x3072 128x64 ks2
#   12.68 / 64x64 13.05; 72x1536 128x64 ks4 9.28 / 64x64 ks2 9.38; 96x4096 128x64 ks2 13.53 / 64x64
#   13.73; 128x1024 64x64 ks3 8.21 / 64x32 ks2 8.33; 96x576 64x32 ks3 6.87 / 128x32 ks4 (72 CTAs)
#   7.15; 128x256 64x32 ks4 6.03 / 128x32 ks4 (32 CTAs) 6.96.
_SPLIT_K_MIN_K = 4096
_SPLIT_K_MAX_M = 128  # one 128-row M-block (see `pick`)
# From K = 6144: "the most CTAs" within this factor; a k-block's fixed cost and an extra split's, in KB
_SPLIT_K_CTA_SLACK = 0.75
_K_BLOCK_FIXED_KB = 12
_SPLIT_EXCHANGE_KB = 64
_SPLIT_K_FITTED_MIN_K = 6144  # the fitted cost from here (measured at 4096 and 7168, not between)
# The tiles and split counts split-K is compiled for: is_split_k_tile (kMaxSplitKBlockN) and
# kMaxKSplits in cuda/gemm/fp8_gemm.h. The 128-row ones run split only (the wave model below never
# takes them).
SPLIT_K_TILE_N = (32, 64)
SPLIT_K_TILES = tuple((bm, bn) for bm in (64, 128) for bn in SPLIT_K_TILE_N)
_SPLIT_ONLY_TILES = tuple(t for t in SPLIT_K_TILES if t[0] == 128)
MAX_K_SPLITS = 4

# clusters(block_m, block_n, cluster_size): how many clusters of that many block_m x block_n CTAs
# fit on the device at once (_kernels.max_active_split_k_clusters asks the CUDA runtime).
ClusterCapacity = Callable[[int, int, int], int]


def _split_k_tile(m: int, n: int, k: int, num_sms: int,
                  clusters: Optional[ClusterCapacity]) -> Optional[tuple[int, int, int]]:
    """(block_m, block_n, k_splits) of the split decode tile, or None where no split beats the
    unsplit tiles (see the comments above)."""
    if clusters is None or k < _SPLIT_K_MIN_K or m > _SPLIT_K_MAX_M:
        return None
    num_k_blocks = cdiv(k, 128)
    # From K = 6144: the fitted cost, with the 128-row tiles at M = 65..128; below, the 64-row tiles
    # by the most CTAs, then the fewest k-blocks (see the comment above).
    fitted = k >= _SPLIT_K_FITTED_MIN_K
    options = []  # (CTAs, k-blocks per CTA, splits, block_m, block_n)
    for bm, bn in SPLIT_K_TILES:
        if bm == 128 and (m <= 64 or not fitted):
            continue
        tiles = cdiv(m, bm) * cdiv(n, bn)
        for splits in range(1, MAX_K_SPLITS + 1):
            if splits == 1:
                waves = cdiv(tiles, num_sms)
                ctas = tiles / waves if fitted else min(tiles, num_sms)
                options.append((ctas, waves * num_k_blocks, splits, bm, bn))
            elif tiles * splits <= num_sms and tiles <= clusters(bm, bn, splits):
                options.append((tiles * splits, cdiv(num_k_blocks, splits), splits, bm, bn))
    if not fitted:
        key = lambda o: (-o[0], o[1], o[4])  # the most CTAs, then the fewest k-blocks
    else:
        most = max(o[0] for o in options) * _SPLIT_K_CTA_SLACK
        options = [o for o in options if o[0] >= most]
        cost = lambda o: o[1] * (_K_BLOCK_FIXED_KB + (o[3] + o[4]) * 128 / 1024) + _SPLIT_EXCHANGE_KB * (o[2] - 1)
        key = lambda o: (cost(o), -o[3], o[2], o[4])
    _, _, splits, bm, bn = min(options, key=key)
    return None if splits == 1 else (bm, bn, splits)


def _decode_tile(m: int, n: int, k: int, num_sms: int,
                 clusters: Optional[ClusterCapacity]) -> Optional[tuple[int, int, int]]:
    """(block_m, block_n, k_splits) of a decode GEMM's tile (see the comments above): split over K
    where that pays; else, at M <= 64, the unsplit 64-row tile of `_decode_block_n`; None for
    M = 65..128 without a split (the wave model picks)."""
    split = _split_k_tile(m, n, k, num_sms, clusters)
    if split is None and m <= 64:
        split = 64, _decode_block_n(m, n, num_sms), 1
    return split


# Two decode GEMMs without a pipeline, selected by pseudo-tiles (fp8_gemm.h): each CTA takes a few
# rows of B and all of K, every load of a step issued at once, instead of walking k-blocks one at a
# time through a TMA pipeline. Both need long K (K >= 4096) to beat the 64-row tiles.
# - GEMV_MMA (kGemvMmaMaxM x kGemvMmaRows, cuda/gemm/fp8_gemv_mma.cu): M <= 8 on mma.sync, 16 rows
#   of B per CTA. 1.12x the best tile at 3x2112x7168 (10.6 against 9.5 TFLOP/s) and 8x4096x7168
#   (40.4 against 36.2), where N / 16 CTAs fill the SMs; not where they would not (8x576x7168: 8.8
#   against 9.4 on 64x32 split 4 ways), nor at short K (8x7168x2048 28.2 against 28.8; 8x24576x1536
#   39.9 against 42.6).
# - GEMV (kGemvMaxM x kGemvRows, cuda/gemm/fp8_gemv.cu): M <= 4 on the CUDA cores, 8 rows of B per
#   CTA: faster than GEMV_MMA at M <= 2 (2x2112x7168: 8.2 against 7.1) and where 16-row CTAs would
#   not fill the SMs (4x576x7168: 5.1 against 4.4 and 4.7 on the best tile).
# (H200, RESULTS.md session 31, `--suite gemm-sweep`.)
# Short K (512 <= K <= 1024): GEMV_MMA at every M <= 8 where its CTAs fill the SMs, where a tile's
# few k-blocks leave its pipeline's fixed cost exposed: 1.12-1.36x the picked tile at K = 512 (M 1-8,
# N 4096-32768), 1.14-1.32x at K = 1024 up to N = 7168 and 0.98-1.07x at N 16384-32768 (1x2112x1024:
# 1.27x, GEMV 1.55x). From K = 1536 to 3072 the tiles are as fast or faster (0.92-1.0x): the tiles.
# (H200, RESULTS.md session 33.)
GEMV = GemmConfig(block_m=4, block_n=8, num_stages=0, num_sms=0, multicast=1)
GEMV_MMA = GemmConfig(block_m=8, block_n=16, num_stages=0, num_sms=0, multicast=1)
_PIPELINE_FREE_MIN_K = 4096
_SHORT_K = (512, 1024)


def _pipeline_free(m: int, n: int, k: int, num_sms: int) -> Optional[GemmConfig]:
    """GEMV, GEMV_MMA or None (a tile) for a decode GEMM: see the comment above."""
    if m > GEMV_MMA.block_m:
        return None
    fills_the_sms = cdiv(n, GEMV_MMA.block_n) >= num_sms
    if _SHORT_K[0] <= k <= _SHORT_K[1]:
        return GEMV_MMA if fills_the_sms else None
    if k < _PIPELINE_FREE_MIN_K:
        return None
    if m > 2 and fills_the_sms:
        return GEMV_MMA
    return GEMV if m <= GEMV.block_m else None


def pick(m: int, n: int, k: int, out_dtype, num_sms: int,
         split_k_clusters: Optional[ClusterCapacity] = None) -> GemmConfig:
    """The configuration for one static shape (K scales every tile's main loop alike; it only
    changes the ranking where a tile's fixed costs are exposed, see `_tile_factor`). M <= 8 with
    K >= 4096 or K = 512-1024 runs without a pipeline (`_pipeline_free`); M <= 128 takes a decode
    tile split over K where that pays (`_decode_tile`; no split without `split_k_clusters`, the
    device's cluster capacity), else at M <= 64 an unsplit 64-row tile and at M = 65..128 the wave
    model's pick."""
    pipeline_free = _pipeline_free(m, n, k, num_sms)
    if pipeline_free is not None:
        return pipeline_free
    # Decode shapes split over K where that pays (128x2112x7168: 128x64 split 3 ways, 99 CTAs over
    # 19 k-blocks each, +11% over the wave model's 64x32; RESULTS.md, sessions 33-34); M = 65..128
    # without a split takes the wave model below.
    decode = _decode_tile(m, n, k, num_sms, split_k_clusters)
    if decode is not None:
        return GemmConfig(block_m=decode[0], block_n=decode[1], num_stages=0, num_sms=int(num_sms), multicast=1,
                          k_splits=decode[2])

    def candidates():
        for bm, bn in COMPILED_TILES:
            if _offered(bm, out_dtype) and (bm, bn) not in _SPLIT_ONLY_TILES:
                # 128x176 (bf16, K = 7168) beat every other tile where this model takes it: +2-9%
                # over the earlier picks at 4096 / 8192 x 2112, 2048x7168, 1024x14336, 512x28672
                # (H200, sessions 45-46).
                paired = _forward_pairs_share_a(bm, m, n, k, num_sms)
                waves = _dense_waves(m, cdiv(m, bm) * cdiv(n, bn), bm, num_sms, paired)
                yield bm, bn, waves, _tile_factor(bm, bn, k, out_dtype, waves)

    config = _cheapest(candidates(), num_sms)
    config = _share_a_on_256_rows(config, _forward_pairs_share_a(config.block_m, m, n, k, num_sms))
    return _pairs_for_rows_off_sectors(config, m, k, num_sms)


# K an odd multiple of 16 (K = 16 mod 32): every other row of A and B starts 16 bytes into a
# 32-byte sector, and the TMA loads of an unpaired tile take 34-61% longer than at K + 16 (4096x2112x6928
# on 128x176: 152.2 us against 94.9 at K = 6944; 2048x7168x1008 on 256x128: 41.8 against 31.1;
# the decode tiles 5-34%). Pairs halve one operand's loads per CTA and take back most of it: the
# 256x128 tile sharing A +15-42% over unpaired (18 shapes, K = 496-6928), the 128-row tiles sharing
# B +14-39% (7 shapes: M = 256-8192, N = 2112-14336, K = 2064-7184; sharing A is within 10%).
# (H200, harness; the package +18-39% on eight shapes: RESULTS.md, session 56.) The tile stays the
# wave model's; a 128-row tile pairs where M has two M-blocks at least.
_SECTOR_BYTES = 32


def _pairs_for_rows_off_sectors(config: GemmConfig, m: int, k: int, num_sms: int) -> GemmConfig:
    """`config` in CTA pairs where K = 16 mod 32 makes unpaired loads slow (above)."""
    if k % _SECTOR_BYTES == 0 or num_sms < 2 or config.multicast != 1 or config.k_splits != 1:
        return config
    if config.block_m == 256:
        return _share_a_on_256_rows(config, True)
    if config.block_m == 128 and m > 128:
        return dataclasses.replace(config, multicast=2, multicast_a=0)
    return config


# (block_m, block_n) pairs compiled for the grouped kernels: kCompiledGroupedTiles in
# cuda/gemm/fp8_gemm.h (multicast is not supported there).
COMPILED_GROUPED_TILES = ((256, 128), (128, 128), (64, 128))


def pick_grouped(m: int, n: int, k: int, g: int, num_sms: int, *, masked: bool = False,
                 out_dtype=jnp.bfloat16) -> GemmConfig:
    """The configuration of a grouped GEMM from its static shape (group sizes are traced values).

    m is the total row count M for the contiguous layout and Mmax (rows per group) for the masked
    one. The number of M-tiles is estimated: masked, g * cdiv(Mmax, bm) (a group's tiles never
    straddle groups; the kernel skips rows past masked_m, so this is the worst case); contiguous,
    cdiv(M, bm) plus the expected waste of each group's partial last tile, since groups are not
    padded, unless the even split M / g is a multiple of bm (then groups are likely aligned). A
    partial tile costs a whole one, half a tile on average beyond its rows; the 256-row tile's
    partial M-blocks with at most 128 rows run as wide tiles (128 rows x two N-blocks) at half
    the cost per N-block, a quarter of a tile on average. The same wave-and-tile cost model as
    `pick` then chooses: 256x128 (bf16 output) or 128x128 when groups have many rows, 64x128 when
    the expected rows per group are small (a partial tile wastes less there).
    """
    del k
    g = max(int(g), 1)

    def candidates():
        for bm, bn in COMPILED_GROUPED_TILES:
            if not _offered(bm, out_dtype):
                continue
            if masked:
                m_tiles = g * cdiv(m, bm)
            else:
                aligned = m % g == 0 and (m // g) % bm == 0
                waste = 0.25 if bm == 256 else 0.5  # per group, in tiles (see above)
                m_tiles = cdiv(m, bm) + (0 if aligned else min(g, m) * waste)
            yield bm, bn, _waves(m_tiles * cdiv(n, bn), num_sms), 1.0

    return _cheapest(candidates(), num_sms)


# (block_m, block_n) pairs compiled for the weight-gradient kernels (dense and k-grouped, f32 and
# bf16 output): kCompiledWgradTiles in cuda/gemm/fp8_gemm.h.
COMPILED_WGRAD_TILES = ((256, 128), (256, 96), (128, 128), (128, 112), (64, 128))

# The 256x96 wgrad tile computes its scale products on the tensor cores (GemmTraits::kScaleMma:
# one FFMA per element instead of an FMUL and an FFMA, the scale operands made by XLA beforehand:
# wgrad.scale_operand_a / _b). Its measured time per tile relative to what the cost model charges
# against the 256x128 tile: 0.840 / 0.840 / 0.836 at 8192^2 / 7168^2 / 4096x7168 x 8192 tokens
# (dense, H200, harness, mc2A; RESULTS.md, session 26); k-grouped 8 x 4096 tokens at 4096x7168,
# unpaired against 256x128 pairs: 0.845 (f32 out). A's operand made ready since then runs the tile
# another 2-4% faster (session 27); the factor is kept, as the tile already wins wherever its waves
# fill the SMs and the pick near the boundary with the 128-row tiles is unmeasured.
_SCALE_MMA_FACTOR = 0.84
_SCALE_MMA_TILE = (256, 96)
# The factor for k-grouped tiles of few k-blocks. The tile saves per k-block (its promotion) and
# pays per tile (the scale product's wgmma per wave, and 4/3 the tiles of 256x128), so short tiles
# lose the saving: M7168 N2048 bf16, against 256x128 in pairs, its time relative to the cost model
# was 0.95 / 0.93-0.98 / 0.93 at 1 / 2 / 4 k-blocks per group, against 0.84 at 32 (RESULTS.md,
# session 64, calls G-H). Since 256x128 posts its tiles (session 65), at MoE-like sizes on three
# to five shapes (RESULTS.md, session 66, calls A, E, F), 256x128 against 256x96:
#   k-blocks per group      8            10           12           14           16
#   bf16 out          0.98-1.00x   0.99-1.00x   1.01-1.02x   1.02-1.04x   1.03-1.05x
#   f32 out             0.91x      0.94-0.95x   0.96-0.98x   0.98-0.99x   1.00-1.01x
# (f32: 256x96's epilogue stages more bytes). The dense wgrad keeps 0.84: there 256x96 ran 1-9%
# faster at 1024-8192 tokens, f32 and bf16 (session 66, call E). On an H100 through the op (session
# 68, call A: bursts from idle) the crossing is the same for bf16 and above 16 k-blocks for f32,
# but a harness with a settled clock had 256x96 ahead from 12 (f32) and 8 (bf16) (session 67).
# Through the op, with 256x96 storing its first slice during its last k-block (session 69, H100,
# `python -m jax_fp8gemm.bench --suite wgrad-sweep`, M7168 N2048 / M2048 N7168), 256x128 against
# 256x96 as above:
#   k-blocks per group     6          8          10         12         14         16         20
#   bf16, settled      0.99x      1.00x      1.01-1.02x 1.03x      1.04-1.05x 1.02-1.03x 1.06-1.08x
#   bf16, sustained    0.97-0.99x 0.99-1.01x 1.01-1.03x 1.02-1.04x 1.02-1.04x 1.02-1.04x 1.07-1.08x
#   f32, settled       0.96-0.97x 0.96-0.98x 0.96-0.98x 0.98-0.99x 1.00-1.02x 1.00-1.04x 1.05-1.06x
#   f32, sustained     0.95-0.97x 0.93-0.96x 0.94-0.99x 0.94-0.96x 0.98-1.00x 0.98-1.00x 1.03x
# bf16 crosses at 8 under both clocks. f32 crosses at 14 settled, between 16 and 20 sustained:
# the threshold stays between the two (at 14-16 either tile is within 0-3.5% of the other).
_SCALE_MMA_SHORT_FACTOR = 0.93
# Mean k-blocks per group up to which a k-grouped tile is short, by what the kernel writes.
_SCALE_MMA_SHORT_K_BLOCKS = {"bfloat16": 8, "float32": 14}


def takes_scale_operand(config: GemmConfig) -> bool:
    """Whether the wgrad kernel (dense or k-grouped) of `config` reads the scale operands
    (wgrad.scale_operand_a, wgrad.scale_operand_b) instead of the scales."""
    return (config.block_m, config.block_n) == _SCALE_MMA_TILE


def pick_wgrad(m: int, n: int, t: int, num_sms: int, *, g: int = 1,
               k_grouped: bool = False, out_dtype=jnp.float32, tile: tuple[int, int] | None = None) -> GemmConfig:
    """The configuration of a weight-gradient GEMM (out [g, m, n], contracted over t tokens;
    g groups with k_grouped, else the dense kernel and g = 1) whose kernel writes out_dtype
    (bfloat16; any other dtype is written as float32). With `tile` (block_m, block_n), one of
    COMPILED_WGRAD_TILES, that tile as the picker would run it (its CTA pairing) instead of the
    cost model's choice: what a benchmark compares the pick against (`--suite wgrad-sweep`).

    Same wave-and-tile cost model as `pick` over the wgrad tiles (every group has the same output
    tile grid; the tokens only scale the work per tile). The 128-row tiles run the deferred
    promotion loop, the 256-row tile the two-wave loop (measured 2-4% faster than 128x128 dense,
    up to 13% k-grouped: RESULTS.md, session 10); only the k-grouped 64x128 takes the serial
    one-wave loop (GemmTraits::kExtraRegisters), charged as in `pick`. The 256x128 tile runs in
    CTA pairs sharing A, as in `pick` (k-grouped: where N has an even number of N-blocks).
    """
    g = max(int(g), 1)
    short_k_blocks = _SCALE_MMA_SHORT_K_BLOCKS["bfloat16" if jnp.dtype(out_dtype) == jnp.bfloat16 else "float32"]

    def candidates():
        for bm, bn in COMPILED_WGRAD_TILES:
            if m <= 64 and bm > 64:
                continue
            if m > 64 and bm == 64:
                continue  # one math warpgroup: only for small M
            tiles = g * cdiv(m, bm) * cdiv(n, bn)
            if k_grouped:  # its own scheduler: no halved tail
                waves = _waves(tiles, num_sms)
            else:  # the dense scheduler
                waves = _dense_waves(m, tiles, bm, num_sms, _pairs_share_a(bm, t, num_sms))
            if (bm, bn) == _SCALE_MMA_TILE:
                short = k_grouped and t / (128 * g) <= short_k_blocks
                yield bm, bn, waves, _SCALE_MMA_SHORT_FACTOR if short else _SCALE_MMA_FACTOR
                continue
            # the serial loop with per-column scales: measured 12-20% slower per tile (session 9;
            # not re-measured since that loop is unrolled)
            yield bm, bn, waves, 1.15 if k_grouped and bm == 64 else 1.0

    if tile is not None:
        if tuple(tile) not in COMPILED_WGRAD_TILES:
            raise ValueError(f"pick_wgrad: tile must be one of {COMPILED_WGRAD_TILES}, got {tile}")
        config = GemmConfig(block_m=tile[0], block_n=tile[1], num_stages=0, num_sms=int(num_sms), multicast=1)
    else:
        config = _cheapest(candidates(), num_sms)
    if k_grouped and cdiv(n, config.block_n) % 2:
        return config  # k-grouped pairs share A on pairs of N-blocks of one group
    return _share_a_on_256_rows(config, _pairs_share_a(config.block_m, t, num_sms))
