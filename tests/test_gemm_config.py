"""The configuration pickers (gemm_config.py): they only hand out tiles the extension compiles,
respect the kernels' rules (256-row tiles bf16 only, 64-row tiles for small M), and their tile
lists mirror the C++ registries."""

import itertools
import pathlib
import re

import jax.numpy as jnp
import pytest

from jax_fp8gemm import gemm_config as gc

HEADER = pathlib.Path(__file__).resolve().parents[1] / "cuda" / "gemm" / "fp8_gemm.h"

SHAPES_M = (1, 64, 65, 128, 129, 1000, 4096, 8192)
SHAPES_N = (16, 136, 2112, 4096, 7168, 24576)
SMS = (132, 114, 78)
DTYPES = (jnp.bfloat16, jnp.float32)


def h200_clusters(block_m: int, block_n: int, size: int) -> int:
    """What CUDA's occupancy query answered on an H200 (132 SMs) for the dense 64-row kernels:
    clusters of 2, 3, 4, ... CTAs that fit at once (RESULTS.md, session 30)."""
    return {1: 132, 2: 66, 3: 39, 4: 30, 5: 22, 6: 17, 7: 15, 8: 15}[size]


def ideal_clusters(sms: int):
    return lambda block_m, block_n, size: sms // size


def cpp_tiles(name: str) -> set[tuple[int, int]]:
    """The (block_m, block_n) pairs of `inline constexpr CompiledTile name[] = {...};`."""
    text = HEADER.read_text()
    body = re.search(rf"{name}\[\]\s*=\s*\{{(.*?)\}};", text, re.S)
    assert body, f"{name} not found in {HEADER}"
    return {(int(m), int(n)) for m, n in re.findall(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}", body.group(1))}


@pytest.mark.parametrize("python, cpp", [(gc.COMPILED_TILES, "kCompiledTiles"),
                                         (gc.COMPILED_GROUPED_TILES, "kCompiledGroupedTiles"),
                                         (gc.COMPILED_WGRAD_TILES, "kCompiledWgradTiles")])
def test_tile_lists_mirror_the_cpp_registries(python, cpp):
    assert set(python) == cpp_tiles(cpp)


def test_split_k_and_gemv_constants_mirror_the_cpp_header():
    """The split-K bounds and the pipeline-free GEMMs' pseudo-tiles as fp8_gemm.h defines them."""
    text = HEADER.read_text()
    value = lambda name: int(re.search(rf"constexpr int {name} = (\d+);", text).group(1))
    assert gc.MAX_K_SPLITS == value("kMaxKSplits")
    assert max(gc.SPLIT_K_TILE_N) == value("kMaxSplitKBlockN")
    assert (gc.GEMV.block_m, gc.GEMV.block_n) == (value("kGemvMaxM"), value("kGemvRows"))
    assert (gc.GEMV_MMA.block_m, gc.GEMV_MMA.block_n) == (value("kGemvMmaMaxM"), value("kGemvMmaRows"))


@pytest.mark.parametrize("out_dtype", DTYPES)
def test_pick_dense(out_dtype):
    for m, n, sms in itertools.product(SHAPES_M, SHAPES_N, SMS):
        c = gc.pick(m, n, 7168, out_dtype, sms)
        if m <= gc.GEMV_MMA.block_m:
            assert c in (gc.GEMV, gc.GEMV_MMA), (m, n, sms)  # pipeline-free (K = 7168)
            continue
        assert (c.block_m, c.block_n) in gc.COMPILED_TILES
        assert (c.num_sms, c.num_stages) == (sms, 0)
        if c.k_splits == 1:  # (no split-K without the cluster capacity)
            assert (c.block_m, c.block_n) not in ((128, 32), (128, 64)), (m, n, sms)  # split-K only
        # CTA pairs sharing A on the 256x128 tile (K = 7168 here), no clusters otherwise
        paired = (c.block_m, c.block_n) == (256, 128)
        assert (c.multicast, c.multicast_a) == ((2, 1) if paired else (1, 0)), (m, n, sms)
        if out_dtype == jnp.float32:
            assert c.block_m != 256, (m, n, sms)  # not offered for f32
        if m <= 64:
            assert c.block_m == 64, (m, n, sms)  # a second math warpgroup would multiply zeros


@pytest.mark.parametrize("m,n,block_n", [
    (9, 2112, 32), (64, 2112, 32), (64, 3072, 32), (9, 3072, 64), (32, 3072, 64), (16, 4096, 64),
    (64, 4096, 64), (32, 5120, 64), (9, 8192, 128), (64, 14336, 128)])
def test_pick_decode_unsplit_takes_the_measured_tile(m, n, block_n):
    """9 <= M <= 64 on 132 SMs, no split-K: the 64-row tile that measured fastest (or within 1%) on
    an H100 at K = 7168 (RESULTS.md, session 21, at M = 1, whose 8 loaded rows the tile rule shares
    with M = 8; the old wave model took 64x32 at 1x4096x7168, 14% slower). M <= 8 runs without a
    pipeline at this K (test_pick_pipeline_free_for_decode)."""
    c = gc.pick(m, n, 7168, jnp.bfloat16, 132)
    assert (c.block_m, c.block_n, c.k_splits) == (64, block_n, 1)
    assert (64, c.block_n) in gc.COMPILED_TILES


@pytest.mark.parametrize("m,n,k,block_n", [
    (16, 18432, 7168, 192), (64, 18432, 7168, 192),  # 96 tiles in one wave, not 144 in two: +11%
    (9, 24576, 1536, 192), (64, 24576, 1536, 192),  # 128 in one wave, not 192 in two: the same or 1% better
    (9, 8192, 2048, 128),  # 43 tiles of 192 on 132 SMs: 25% slower
    (64, 7168, 2048, 128), (32, 17000, 7168, 128),  # too few 192-wide tiles (38, 89)
    (64, 36864, 7168, 128)])  # 192 tiles of 192 in two waves hold as many columns as 288 of 128 in three
def test_pick_decode_wide_tile(m, n, k, block_n):
    """64x192 takes over from 64x128 where its waves hold fewer columns per CTA and its tiles fill
    >= 70% of the SMs (RESULTS.md, session 32, H200 sweep)."""
    c = gc.pick(m, n, k, jnp.bfloat16, 132, h200_clusters)
    assert (c.block_m, c.block_n, c.k_splits) == (64, block_n, 1), c
    assert (64, c.block_n) in gc.COMPILED_TILES


@pytest.mark.parametrize("m,n,k,block_m,block_n,k_splits", [
    (9, 2112, 4096, 64, 32, 2), (64, 2112, 4096, 64, 32, 2),  # 66 tiles x 2 = 132 CTAs
    (9, 2112, 7168, 64, 64, 3), (64, 2112, 7168, 64, 64, 3),  # from K = 6144: 33 x 3 = 99 over 19 k-blocks
    (9, 576, 7168, 64, 32, 4), (16, 1024, 7168, 64, 32, 3),  # 18 x 4, 32 x 3 (32 clusters of 4 do not fit)
    (9, 1536, 7168, 64, 64, 4),  # 24 x 4 = 96 CTAs, as many as 48 x 2 of 64x32 and half their k-blocks
    (16, 4096, 7168, 64, 64, 2), (32, 3072, 7168, 64, 64, 2), (64, 3072, 7168, 64, 64, 2),  # 64 / 48 tiles x 2
    (64, 2112, 2048, 64, 32, 1),  # K too short to pay for the exchange
    (9, 8192, 7168, 64, 128, 1), (64, 14336, 7168, 64, 128, 1), (32, 5120, 7168, 64, 64, 1),  # no split fits
    # M = 65..128 (session 34, A/B measured): one 128-row M-block, 33 tiles x 3 = 99 CTAs over 19
    # k-blocks rather than 2 x 33 x 2 = 132 over 28; 24 x 4; 64 x 2 (as many CTAs as 2 x 64 tiles of
    # 64x64 unsplit, half their k-blocks); 48 x 2 (96 CTAs, as 2 x 48 64x64 tiles unsplit)
    (72, 2112, 7168, 128, 64, 3), (96, 2112, 7168, 128, 64, 3), (128, 2112, 7168, 128, 64, 3),
    (128, 2112, 16384, 128, 64, 3), (128, 1536, 7168, 128, 64, 4), (96, 4096, 7168, 128, 64, 2),
    (128, 3072, 7168, 128, 64, 2),
    # ... and two 64-row M-blocks where the 128-row splits have too few CTAs (72 of 108, 32 of 64)
    # or a short k-loop (11 k-blocks of 24 KB and two exchanges against 16 of 16 KB and one)
    (96, 576, 7168, 64, 32, 3), (128, 256, 7168, 64, 32, 4), (128, 2048, 4096, 64, 64, 2),
    (72, 2112, 4096, 64, 64, 2), (128, 1024, 7168, 64, 64, 3), (72, 1536, 7168, 128, 64, 4),
    (128, 1536, 4096, 64, 64, 2), (96, 3072, 4096, 64, 64, 1), (128, 4096, 4096, 64, 64, 1),  # K = 4096
    (96, 2048, 16384, 128, 64, 3),
    (128, 2112, 2048, None, None, 1), (128, 7168, 16384, None, None, 1),  # K too short; no split fits
    (129, 2112, 7168, None, None, 1)])  # three 64-row M-blocks: not a decode shape
def test_decode_split_k(m, n, k, block_m, block_n, k_splits):
    """Split-K on the H200's cluster capacity (`h200_clusters`): the configurations that measured
    best or within 2% of it (RESULTS.md, sessions 29-30, at M = 1: the split does not depend on M;
    session 34 at M = 16-128, N = 256-4096: the faster in A/B runs)."""
    c = gc.pick(m, n, k, jnp.bfloat16, 132, h200_clusters)
    assert (block_m or c.block_m, block_n or c.block_n, c.k_splits) == (c.block_m, c.block_n, k_splits), c
    if k_splits > 1:
        assert (c.block_m, c.block_n) in gc.SPLIT_K_TILES and c.multicast == 1
    else:
        assert (c.block_m, c.block_n) not in ((128, 32), (128, 64)), c  # split-K only
    assert "k_splits" not in c.attributes()  # the grouped and wgrad FFI calls take no k_splits


@pytest.mark.parametrize("sms", SMS)
@pytest.mark.parametrize("clusters", ["h200", "ideal", "none fit"])
def test_decode_split_k_fits_the_device(sms, clusters):
    """A split-K grid never exceeds the SMs nor the clusters that fit at once (a second round of
    clusters would double the time), on any decode shape, whatever the device's capacity."""
    capacity = {"h200": h200_clusters, "ideal": ideal_clusters(sms), "none fit": lambda bm, bn, s: 0}[clusters]
    for m, n, k in itertools.product((9, 33, 64, 65, 128), (16, 576, 1024, 2112, 4096, 7168, 24576),
                                     (2048, 4096, 7168)):
        c = gc.pick(m, n, k, jnp.bfloat16, sms, capacity)
        tiles = -(-m // c.block_m) * -(-n // c.block_n)
        if clusters == "none fit" or k < 4096:
            assert c.k_splits == 1
        if c.k_splits > 1:
            assert tiles * c.k_splits <= sms and tiles <= capacity(c.block_m, c.block_n, c.k_splits), (m, n, k, c)
            assert (c.block_m, c.block_n) in gc.SPLIT_K_TILES and 2 <= c.k_splits <= 4
            assert c.block_m == 64 or m > 64  # a 128-row tile's second warpgroup needs rows


@pytest.mark.parametrize("out_dtype", DTYPES)
@pytest.mark.parametrize("masked", [False, True])
def test_pick_grouped(out_dtype, masked):
    for m, n, g, sms in itertools.product(SHAPES_M, SHAPES_N, (1, 8, 256), SMS):
        c = gc.pick_grouped(m, n, 7168, g, sms, masked=masked, out_dtype=out_dtype)
        assert (c.block_m, c.block_n) in gc.COMPILED_GROUPED_TILES
        assert (c.multicast, c.multicast_a) == (1, 0)
        if out_dtype == jnp.float32:
            assert c.block_m != 256, (m, n, g, sms)


@pytest.mark.parametrize("k_grouped", [False, True])
def test_pick_wgrad(k_grouped):
    for m, n, g, sms in itertools.product(SHAPES_M, SHAPES_N, (1, 8), SMS):
        c = gc.pick_wgrad(m, n, 8192, sms, g=g, k_grouped=k_grouped)
        assert (c.block_m, c.block_n) in gc.COMPILED_WGRAD_TILES
        # T = 8192 here; k-grouped pairs need an even number of N-blocks
        paired = c.block_m == 256 and not (k_grouped and -(-n // c.block_n) % 2)
        assert (c.multicast, c.multicast_a) == ((2, 1) if paired else (1, 0)), (m, n, g, sms)
        assert (c.block_m == 64) == (m <= 64), (m, n, g, sms)  # one math warpgroup only for small M


@pytest.mark.parametrize("k_grouped", [False, True])
def test_pick_wgrad_of_a_given_tile(k_grouped):
    """`tile` overrides the cost model's choice and keeps the picker's pairing rule (what
    `--suite wgrad-sweep` times): 256-row tiles in CTA pairs sharing A, k-grouped only where N
    has an even number of N-blocks (2048: 16 / 22 blocks; 7168: 56 / 75); the pick itself is one of
    them. A tile that is not compiled is refused."""
    g = 24 if k_grouped else 1
    for m, n in ((7168, 2048), (2048, 7168)):
        for tile in gc.COMPILED_WGRAD_TILES:
            c = gc.pick_wgrad(m, n, 32768, 132, g=g, k_grouped=k_grouped, tile=tile)
            paired = tile[0] == 256 and not (k_grouped and -(-n // tile[1]) % 2)
            assert ((c.block_m, c.block_n), c.multicast, c.multicast_a) == (tile, *((2, 1) if paired else (1, 0)))
        picked = gc.pick_wgrad(m, n, 32768, 132, g=g, k_grouped=k_grouped)
        tile = (picked.block_m, picked.block_n)
        assert gc.pick_wgrad(m, n, 32768, 132, g=g, k_grouped=k_grouped, tile=tile) == picked
    with pytest.raises(ValueError, match="tile must be one of"):
        gc.pick_wgrad(7168, 2048, 32768, 132, g=g, k_grouped=k_grouped, tile=(128, 96))


@pytest.mark.parametrize("out_dtype,short_groups", [(jnp.bfloat16, (32, 64, 128, 256)),
                                                    (jnp.float32, (24, 32, 64, 128, 256))])
def test_k_grouped_wgrad_of_few_tokens_per_group_skips_the_scale_mma_tile(out_dtype, short_groups):
    """256x96 saves per k-block and pays per tile: k-grouped groups of few tokens take 256x128 in
    pairs. Measured (RESULTS.md, sessions 64 and 66): with bf16 out 256x128 is faster up to 1024
    tokens per group (8 k-blocks) and 256x96 from 1536 (12); with f32 out 256x128 is faster up to
    1792 (14) and even at 2048 (16). The dense wgrad keeps 256x96 (1-9% faster at 1024-8192 tokens)."""
    for g in short_groups:  # 32768 tokens: 1365 per group at 24 groups, 1024 at 32
        c = gc.pick_wgrad(7168, 2048, 32768, 132, g=g, k_grouped=True, out_dtype=out_dtype)
        assert ((c.block_m, c.block_n), c.multicast, c.multicast_a) == ((256, 128), 2, 1), g
    for g in (8, 16) + (() if 24 in short_groups else (24,)):
        assert gc.pick_wgrad(7168, 2048, 32768, 132, g=g, k_grouped=True, out_dtype=out_dtype).block_n == 96, g
    for t in (1024, 8192):
        assert gc.pick_wgrad(7168, 7168, t, 132, out_dtype=out_dtype).block_n == 96
    # float16 is written as float32 (and converted afterwards): float32's threshold
    assert gc.pick_wgrad(7168, 2048, 32768, 132, g=24, k_grouped=True, out_dtype=jnp.float16).block_n == 128


def test_large_shapes_take_the_256_row_tiles():
    """Measured fastest where the wave count allows (RESULTS.md, sessions 9 and 10)."""
    assert gc.pick(4096, 7168, 16384, jnp.bfloat16, 132).block_m == 256
    assert gc.pick_grouped(32768, 4096, 7168, 8, 132).block_m == 256
    assert gc.pick_wgrad(7168, 7168, 8192, 132).block_m == 256
    assert gc.pick_wgrad(4096, 7168, 32768, 132, g=8, k_grouped=True).block_m == 256


def test_pairs_where_rows_start_off_sectors():
    """K = 16 mod 32: unpaired loads are slow, so the wave model's tile runs in pairs (the
    256-row tile sharing A, the 128-row tiles sharing B; RESULTS.md, session 56); decode tiles and
    aligned K are left alone."""
    for m, n, k, tile, mode in ((4096, 2112, 6928, (128, 176), (2, 0)), (2048, 7168, 1008, (256, 128), (2, 1)),
                                (256, 7168, 6928, (128, 112), (2, 0)), (4096, 2112, 6944, (128, 176), (1, 0)),
                                (2048, 7168, 992, (256, 128), (1, 0))):
        c = gc.pick(m, n, k, jnp.bfloat16, 132)
        assert ((c.block_m, c.block_n), (c.multicast, c.multicast_a)) == (tile, mode), (m, n, k)
        assert gc.pick(m, n, k, jnp.bfloat16, 1).multicast == 1
    for m in (1, 16, 64, 128):
        c = gc.pick(m, 7168, 6928, jnp.bfloat16, 132)
        assert c.block_m <= 128 and c.multicast == 1, (m, c)


def test_pairs_share_a_only_where_it_measured_faster():
    """A multicast over CTA pairs: +0.7-2% on the 256x128 tile from K = 2048 up, -0.3% at K = 512
    (RESULTS.md, session 19); a pair needs two SMs. The short-K twins pair up where N is wide: at
    K <= 512 where M is at most 4096 (+1.0-4.9%, session 49), at K <= 384 up to M = 8192 (+1.3-4.7%,
    session 56), at K = 640-896 for any M (+0.2-4.8%, session 50); from N = 10240 where K > 128
    (session 56). Not at smaller N, nor at K = 512 with M > 4096, nor at K <= 384 with M > 8192."""
    for m, n, k, paired in ((4096, 32768, 16384, True), (4096, 32768, 2048, True), (4096, 32768, 1024, True),
                            (4096, 32768, 768, True), (8192, 32768, 640, True), (2048, 18432, 640, True),
                            (4096, 7168, 768, False), (8192, 4096, 640, False), (4096, 32768, 512, True),
                            (1024, 18432, 256, True), (4096, 7168, 512, False), (8192, 32768, 512, False),
                            (6144, 24576, 256, True), (8192, 16384, 384, True), (8192, 32768, 128, True),
                            (8192, 7168, 256, False), (16384, 16384, 128, False), (6144, 32768, 512, False),
                            (4096, 11008, 256, True), (3072, 13824, 384, True), (8192, 15360, 384, True),
                            (8192, 13824, 128, False), (4096, 9216, 512, False), (8192, 11008, 512, False),
                            (4096, 11008, 768, True), (8192, 10240, 896, True), (4096, 9216, 768, False)):
        c = gc.pick(m, n, k, jnp.bfloat16, 132)
        assert (c.block_m, c.block_n) == (256, 128), (m, n, k)
        assert (c.multicast, c.multicast_a) == ((2, 1) if paired else (1, 0)), (m, n, k)
    assert gc.pick(4096, 32768, 512, jnp.bfloat16, 1).multicast == 1
    assert gc.pick(4096, 7168, 16384, jnp.bfloat16, 1).multicast == 1
    assert gc.pick(4096, 7168, 16384, jnp.float32, 132).multicast == 1  # 128-row tiles for f32
    assert gc.pick_wgrad(7168, 7168, 8192, 132).multicast_a == 1  # dense wgrad: also paired
    assert gc.pick_wgrad(4096, 14336, 32768, 132, g=8, k_grouped=True).multicast_a == 1  # 150 N-blocks
    assert gc.pick_wgrad(4096, 7168, 32768, 132, g=8, k_grouped=True).multicast == 1  # 75 N-blocks


def test_short_k_steers_f32_off_the_three_stage_tile():
    """128x192 with f32 output (3 stages) measured 9% slower than the other 128-row tiles at
    K = 512 and 3.5% at K = 1536 (RESULTS.md, session 16)."""
    assert gc.pick(4096, 32768, 512, jnp.float32, 132).block_n != 192
    assert gc.pick(4096, 24576, 1536, jnp.float32, 132).block_n != 192


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8, 9])
def test_pick_pipeline_free_for_decode(m):
    """Where the pipeline-free GEMMs measured faster (M <= 8): at K >= 4096 the mma.sync one from
    M = 3 where its 16-row CTAs fill the SMs, else the CUDA-core one up to M = 4; at K = 512-1024
    the mma.sync one at every M where its CTAs fill the SMs (RESULTS.md, session 33); a 64-row
    tile for K = 1536-3072 and below 512, for M > 8 and for M > 4 on narrow B."""
    for n, k, sms, out_dtype in itertools.product((8, 576, 2112, 24576), (16, 512, 768, 1024, 1536, 2048, 4096, 7168),
                                                  SMS, DTYPES):
        c = gc.pick(m, n, k, out_dtype, sms, h200_clusters)
        fills_the_sms = -(-n // 16) >= sms
        if m <= 8 and 512 <= k <= 1024:
            expected = "gemv mma" if fills_the_sms else "tile"
        elif m > 8 or k < 4096:
            expected = "tile"
        elif m > 2 and fills_the_sms:
            expected = "gemv mma"
        else:
            expected = "gemv" if m <= 4 else "tile"
        got = {gc.GEMV: "gemv", gc.GEMV_MMA: "gemv mma"}.get(c, "tile")
        assert got == expected, (m, n, k, sms, c)
        if got == "tile":
            assert (c.block_m, c.block_n) in gc.COMPILED_TILES and c.block_m == 64
    for pseudo in (gc.GEMV, gc.GEMV_MMA):
        assert (pseudo.block_m, pseudo.block_n) not in gc.COMPILED_TILES


@pytest.mark.parametrize("m,n,k,out_dtype,takes_176", [
    # bf16, against the earlier pick: 0.96x 128x192, 0.96x 128x192, 0.90x 256x128 pairs (K = 7168);
    # 0.93x 256x128 pairs, 0.93x, 0.98x 128x192, 0.99x 128x192 (K = 2048)
    (4096, 2112, 7168, jnp.bfloat16, True), (8192, 2112, 7168, jnp.bfloat16, True),
    (2048, 7168, 7168, jnp.bfloat16, True), (2048, 7168, 2048, jnp.bfloat16, True),
    (1024, 14336, 2048, jnp.bfloat16, True), (8192, 2112, 2048, jnp.bfloat16, True),
    (4096, 2112, 2048, jnp.bfloat16, True),
    # bf16 at K = 512: 1.03x 128x192, 1.04x / 1.17x 256x128
    (4096, 2112, 512, jnp.bfloat16, False), (2048, 7168, 512, jnp.bfloat16, False),
    (4096, 4096, 512, jnp.bfloat16, False),
    # f32: 0.96x 128x192, 0.93x 128x128, 0.93x 128x160, 0.96x 128x128; 1.10x 128x112
    (4096, 2112, 7168, jnp.float32, True), (2048, 7168, 2048, jnp.float32, True),
    (8192, 2112, 2048, jnp.float32, True), (512, 28672, 7168, jnp.float32, True),
    (8192, 6144, 7168, jnp.float32, False)])
def test_pick_128x176_where_it_measured_faster(m, n, k, out_dtype, takes_176):
    """128x176 (three B-scale blocks per tile) where the H200 harness measured it faster than the
    earlier pick, with its serial loop unrolled twice (RESULTS.md, session 46), and not at K = 512
    with bf16 output or where 128x112 won with f32 output."""
    c = gc.pick(m, n, k, out_dtype, 132)
    assert ((c.block_m, c.block_n) == (128, 176)) == takes_176, c


@pytest.mark.parametrize("m,n,k,takes_112", [
    # f32, 128x112 against the best other tile: 0.96x, 0.91x, 0.94x, 0.90x (K = 7168), 0.97x (K = 2048)
    (4096, 4096, 7168, True), (4096, 24576, 7168, True), (8192, 6144, 7168, True),
    (1024, 7168, 7168, True), (4096, 4096, 2048, True),
    # 1.17x / 1.17x 128x128 at K = 512
    (4096, 4096, 512, False), (4096, 7168, 512, False)])
def test_pick_f32_128x112_where_it_measured_faster(m, n, k, takes_112):
    """With f32 output 128x112 (5 stages, deferred promotion) ran 0.84-0.97 of the wave model's
    cost per tile at K >= 2048 and 1.13-1.15 at K = 512 (H200 harness, RESULTS.md, session 46)."""
    c = gc.pick(m, n, k, jnp.float32, 132)
    assert ((c.block_m, c.block_n) == (128, 112)) == takes_112, c


@pytest.mark.parametrize("m,n,k,tile", [
    # held out of the fit, against HEAD's pick then (H200, harness, session 51): 128x176 over
    # 128x112 +8.3% / +7.6%, 128x128 over 128x144 +9.2%, 128x192 over 128x144 +6.2%, 128x192
    # over 128x160 +3.8%, 256x128 over 128x160 +4.7%
    (1088, 9728, 1664, (128, 176)), (576, 17408, 1088, (128, 176)), (1664, 9728, 832, (128, 128)),
    (1152, 10240, 896, (128, 192)), (1664, 24064, 1088, (128, 192)), (2304, 11520, 1088, (256, 128)),
    # kept: 128x160 over 256x128 at 4096x2560x4096 (+4.9%), 128x112 over 256x128 at 512x7168x4096
    # (+6.2%: one tile per CTA)
    (4096, 2560, 4096, (128, 160)), (512, 7168, 4096, (128, 112))])
def test_pick_bf16_short_k_where_it_measured_faster(m, n, k, tile):
    """bf16 output: 128x112 / 144 / 160 pay 0.25 / k-blocks, and the 256x128 tile 0.035 / waves
    beyond its 1.05 (gemm_config._BF16_SHORT_K_CHARGE, _PAIRED_256_PER_WAVES)."""
    c = gc.pick(m, n, k, jnp.bfloat16, 132)
    assert (c.block_m, c.block_n) == tile, c


def test_halved_tail_where_the_launcher_halves_it():
    """gemm_config.halved_tail_tiles mirrors set_tile_order (cuda/gemm/fp8_gemm.cu): a 256-row
    tile's last wave of at most half the grid, when both halves of every tile have rows and pairs
    stay whole."""
    assert gc.halved_tail_tiles(4096, 4096, 256, 132, False) == 4  # 4096x32768: 31 waves + 4 tiles
    assert gc.halved_tail_tiles(4096, 3072, 256, 132, True) == 36  # 4096x24576 in pairs
    assert gc.halved_tail_tiles(4096, 896, 256, 132, True) == 0  # 104 tiles: more than half the grid
    assert gc.halved_tail_tiles(4096, 133, 256, 132, True) == 0  # one tile: a pair would break
    assert gc.halved_tail_tiles(4096, 133, 256, 132, False) == 1
    assert gc.halved_tail_tiles(4000, 133, 256, 132, False) == 1  # last M-block 160 rows: both halves
    assert gc.halved_tail_tiles(3900, 133, 256, 132, False) == 0  # 60 rows: the second half is empty
    assert gc.halved_tail_tiles(4096, 100, 256, 132, False) == 0  # one wave
    assert gc.halved_tail_tiles(4096, 133, 128, 132, False) == 0  # 128-row tiles have no halves


def test_picks_with_the_halved_tail():
    """The wave model charges a halved last wave 0.7 of a whole one and the paired 256x128 loop 1.05
    (H200, session 48): 256x128 where its tail halves at K = 512 and in the SPEC shapes, the
    128-row tiles where they measured faster than 256x128 pairs."""
    for m, n, k in ((4096, 32768, 512), (4096, 24576, 1536), (2048, 5120, 512), (4096, 7168, 16384)):
        assert gc.pick(m, n, k, jnp.bfloat16, 132).block_m == 256, (m, n, k)
    for m, n, k in ((512, 7168, 7168), (1024, 7168, 2048), (3072, 5120, 7168), (2048, 7168, 7168)):
        assert gc.pick(m, n, k, jnp.bfloat16, 132).block_m == 128, (m, n, k)
    # Dense wgrad: 256x96's tail halves at 2048x8192 (0.266 against 0.272 ms for 256x128).
    assert gc.pick_wgrad(2048, 8192, 8192, 132).block_n == 96
