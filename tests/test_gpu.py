"""The CUDA kernels against the reference, on a Hopper GPU (skipped elsewhere).

Fresh random data every run, never zeros. The GEMM output buffer is poisoned first: XLA's
allocator hands the kernel memory that a large NaN array just freed, so an element the kernel
fails to write shows up as NaN.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import calc_diff, dequant64, gpu, grouped_reference64, randn

import jax_fp8gemm as fg
from jax_fp8gemm import _kernels, gemm_config
from jax_fp8gemm.gemm import gemm_kernel_call
from jax_fp8gemm.reference import cdiv
from jax_fp8gemm.wgrad import gemm_wgrad_kernel_call, grouped_gemm_wgrad_kernel_call

pytestmark = [gpu, pytest.mark.gpu]


def bits(x):
    return np.asarray(x).view(np.uint8 if x.dtype == jnp.float8_e4m3fn else np.uint32)


def assert_bitwise(kernel_out, ref_out):
    for got, want in zip(kernel_out, ref_out):
        got, want = np.asarray(got), np.asarray(want)
        assert got.shape == want.shape and got.dtype == want.dtype
        nan = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
        mismatch = (bits(got) != bits(want)) & ~nan
        assert not mismatch.any(), f"{mismatch.sum()} of {mismatch.size} differ"


def cpu_reference(fn, *args):
    """The jnp reference run by XLA:CPU, whose f32 division is IEEE. (XLA:GPU divides
    approximately, so on the GPU the same jnp can differ from the kernels in a handful of
    elements per ten million: one ulp of 1/s moving a value across an e4m3 rounding boundary.)"""
    cpu = jax.devices("cpu")[0]
    return jax.jit(fn)(*[jax.device_put(a, cpu) for a in args])


def poison_allocator(nbytes):
    jnp.full((nbytes // 4 + 1,), jnp.nan, jnp.float32).block_until_ready()


# (37, 130) and (67, 131): rows of 2 mod 4 and odd lengths, loaded as 4-byte words or element by
# element (for all rows, or as each row's alignment allows) and stored as the address allows.
QUANT_SHAPES = [(1, 128), (3, 7, 300), (4096, 7168), (129, 1000), (33, 136), (5, 4), (37, 130), (67, 131)]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("shape", QUANT_SHAPES)
@pytest.mark.parametrize("pow2", [False, True])
def test_quantize_rowwise_kernel_bitwise(rng, dtype, shape, pow2):
    scale = rng.choice([1e-3, 1.0, 300.0])
    x = randn(rng, shape, dtype, scale=scale) * jnp.exp(randn(rng, shape, dtype))
    x = x.at[..., :128].set(0) if shape[-1] > 256 else x  # all-zero groups too
    got = jax.jit(fg.quantize_rowwise, static_argnames="pow2_scale")(x, pow2_scale=pow2)
    ref = cpu_reference(lambda v: fg.reference.quantize_rowwise(v, pow2), x)
    assert_bitwise(got, ref)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("shape", [(128, 128), (300, 260), (2, 7168, 2048), (3, 129, 8), (1, 4), (67, 131)])
@pytest.mark.parametrize("pow2", [False, True])
def test_quantize_blockwise_kernel_bitwise(rng, dtype, shape, pow2):
    w = randn(rng, shape, dtype, scale=rng.choice([1e-2, 1.0, 50.0]))
    got = jax.jit(fg.quantize_blockwise, static_argnames="pow2_scale")(w, pow2_scale=pow2)
    ref = cpu_reference(lambda v: fg.reference.quantize_blockwise(v, pow2), w)
    assert_bitwise(got, ref)


@pytest.mark.parametrize("scale", [1e-30, 1e30])
def test_quantize_extreme_magnitudes(rng, scale):
    x = randn(rng, (64, 512), jnp.float32, scale=scale)
    assert_bitwise(fg.quantize_rowwise(x), cpu_reference(fg.reference.quantize_rowwise, x))
    assert_bitwise(fg.quantize_blockwise(x), cpu_reference(fg.reference.quantize_blockwise, x))


def test_quantize_nan_inf_match_reference(rng):
    x = np.array(randn(rng, (4, 512), jnp.float32))
    x[0, 3], x[1, 300], x[2, 511] = np.nan, np.inf, -np.inf
    x = jnp.asarray(x)
    assert_bitwise(fg.quantize_rowwise(x), cpu_reference(fg.reference.quantize_rowwise, x))
    assert_bitwise(fg.quantize_blockwise(x), cpu_reference(fg.reference.quantize_blockwise, x))


# (3, 1000, 2056): 408 tiles (more than the SMs hold at once), partial ones both ways and batch
# boundaries. (37, 130), (67, 131): as in QUANT_SHAPES; qt rows of odd and 4 mod 16 lengths too.
# (2, 700, 264), (8200, 136): qt rows 12 and 8 mod 16 bytes long over many row tiles (each tile's
# ends share 16-byte chunks and sectors with its neighbours'), across a batch boundary too.
TRANSPOSE_SHAPES = [(128, 128), (4096, 7168), (300, 260), (2, 257, 1000), (33, 136), (5, 4),
                    (16, 4100), (1000, 24), (3, 1000, 2056), (37, 130), (67, 131), (2, 700, 264),
                    (8200, 136)]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("shape", TRANSPOSE_SHAPES)
@pytest.mark.parametrize("mode", ["rowwise", "blockwise", "blockwise transposed only"])
def test_quantize_transpose_kernel_bitwise(rng, dtype, shape, mode):
    """The fused kernel's outputs against the reference (both orientations; or, transposed only,
    the second half), poisoned first; every case has all-zero groups, and a NaN and an inf in one
    row / block."""
    x = np.array(randn(rng, shape, dtype, scale=rng.choice([1e-3, 1.0, 300.0])), np.float32)
    x[..., : min(shape[-2], 128), : min(shape[-1], 128)] = 0  # an all-zero tile corner
    x[..., -1, -1] = np.nan
    x[..., -1, 0] = np.inf
    x = jnp.asarray(x, dtype)
    fn, ref_fn = {
        "rowwise": (fg.quantize_rowwise_transpose, fg.reference.quantize_rowwise_transpose),
        "blockwise": (fg.quantize_blockwise_transpose, fg.reference.quantize_blockwise_transpose),
        "blockwise transposed only": (fg.quantize_blockwise_transposed,
                                      lambda x: fg.reference.quantize_blockwise_transpose(x)[2:]),
    }[mode]
    poison_allocator(4 * x.size)
    got = jax.jit(fn)(x)
    assert "fp8gemm_quantize_transpose" in jax.jit(fn).lower(x).as_text()
    assert_bitwise(got, cpu_reference(ref_fn, x))


R = fg.reference
ALIGNED = {  # op -> (kernel call, reference), x and align
    "rowwise": (lambda x, a: fg.quantize_rowwise(x, align=a), lambda x, a: R.quantize_rowwise(x, False, a)),
    "blockwise": (lambda x, a: fg.quantize_blockwise(x, align=a), lambda x, a: R.quantize_blockwise(x, False, a)),
    "rowwise transpose": (lambda x, a: fg.quantize_rowwise_transpose(x, align=a),
                          lambda x, a: R.quantize_rowwise_transpose(x, False, a)),
    "gelu transpose": (lambda x, a: fg.quantize_rowwise_transpose(x, activation="gelu", align=a),
                       lambda x, a: R.quantize_rowwise_transpose(R.activate(x, "gelu"), False, a)),
    "gelu grad transpose": (
        lambda x, a: fg.quantize_rowwise_transpose_act_grad(x, jnp.flip(x, -1), "gelu", align=a),
        lambda x, a: R.quantize_rowwise_transpose(R.activation_grad(x, jnp.flip(x, -1), "gelu"), False, a)),
    "blockwise transpose": (lambda x, a: fg.quantize_blockwise_transpose(x, align=a),
                            lambda x, a: R.quantize_blockwise_transpose(x, False, a)),
    "blockwise transposed": (lambda x, a: fg.quantize_blockwise_transposed(x, align=a),
                             lambda x, a: R.quantize_blockwise_transpose(x, False, a)[2:]),
}


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("shape", [(300, 260), (2, 257, 1000), (33, 136), (5, 4), (1000, 24), (16, 4100),
                                   (129, 1008), (67, 131)])
@pytest.mark.parametrize("align", [2, 32])
@pytest.mark.parametrize("op", sorted(ALIGNED))
def test_quantizers_pad_with_zeros_bitwise(rng, dtype, shape, align, op):
    """align: every FP8 output is the unpadded kernel's, then zeros up to a multiple of align (poisoned
    first, so an unwritten padding byte would show); the scales are the unpadded kernel's. Bit for
    bit the reference too, NaN and inf groups included (the fused activations are checked against
    the reference with a tolerance elsewhere: their float math is not XLA:CPU's to the bit)."""
    activation = "gelu" in op
    x = np.array(randn(rng, shape, dtype, scale=rng.choice([1e-3, 1.0, 300.0])), np.float32)
    if not activation:
        x[..., -1, -1] = np.nan
        x[..., 0, -1] = np.inf
    x = jnp.asarray(x, dtype)
    fn, ref_fn = ALIGNED[op]
    poison_allocator(8 * x.size)
    got = jax.jit(fn, static_argnums=1)(x, align)
    assert "fp8gemm_quantize" in jax.jit(fn, static_argnums=1).lower(x, align).as_text()
    plain = jax.jit(fn, static_argnums=1)(x, 1)
    for g, p in zip(got, plain):
        if g.dtype != jnp.float8_e4m3fn:
            assert_bitwise([g], [p])
            continue
        assert g.shape[-1] == -(-p.shape[-1] // align) * align
        assert_bitwise([g[..., : p.shape[-1]]], [p])
        if activation:
            assert not bits(g[..., p.shape[-1]:]).any(), "padding not zero"
    if not activation:
        assert_bitwise(got, cpu_reference(lambda v: ref_fn(v, align), x))


def test_quantize_under_vmap_uses_kernel(rng):
    x = randn(rng, (3, 64, 512), jnp.bfloat16)
    hlo = jax.jit(jax.vmap(fg.quantize_rowwise)).lower(x).as_text()
    assert "fp8gemm_quantize_rowwise" in hlo
    assert_bitwise(jax.vmap(fg.quantize_rowwise)(x), cpu_reference(fg.reference.quantize_rowwise, x))


def _layout_copies(compiled_text):
    """Transposes / copies / fusions that produce 2-D or 3-D floating arrays in an optimized HLO
    module: a layout change of scales or weights between a quantizer and a GEMM is one of them."""
    import re
    return re.findall(r"= (?:f32|bf16)\[[\d,]+\]\{[^}]*\} (?:transpose|copy|fusion)\(", compiled_text)


@pytest.mark.parametrize("pipeline", ["gemm", "gemm batched", "gemm decode", "gemm batch-1", "gemm decode mma",
                                      "grouped", "fp8_dot", "ragged_dot", "fp8_mlp"])
def test_no_layout_copies_between_quantizers_and_gemms(rng, pipeline):
    """The quantizers write the row-wise scales MN-major (the layout the GEMM kernels load) and
    hand them on transposed: inside one jit XLA cancels that transpose against the GEMM's (rows a
    multiple of 4; the dense GEMM takes any row count unpadded: "gemm decode", 3 rows, "gemm
    batch-1", one row with K = 4096: the CUDA-core GEMM, and "gemm decode mma", 5 x 2112 x 4096:
    the mma.sync one). The forward-only paths quantize a [K, N] weight in one pass into its [N, K] blocks
    (quantize_blockwise_transposed), with no transposed copy of the weight first."""
    k = 4096 if pipeline in ("gemm batch-1", "gemm decode mma") else 512
    x_shape = {"gemm batched": (2, 256, k), "gemm decode": (3, k), "gemm batch-1": (1, k),
               "gemm decode mma": (5, k)}.get(pipeline, (256, k))
    x = randn(rng, x_shape, jnp.bfloat16)
    w = randn(rng, (2112 if pipeline == "gemm decode mma" else 384, k), jnp.bfloat16)  # [N, K]
    if pipeline == "gemm decode mma":
        assert gemm_config.pick(5, 2112, k, jnp.bfloat16, _kernels.num_sms()) == gemm_config.GEMV_MMA
    w_kn = jnp.asarray(np.asarray(w).T)  # a weight stored [K, N] (materialized, not a view)
    sizes = jnp.array([100, 156], jnp.int32)
    # Every operand is an argument of the jitted function (closed-over constants could be folded).
    fn, args = {
        "gemm": (lambda x, w: fg.gemm(*fg.quantize_rowwise(x), *fg.quantize_blockwise(w)), (x, w)),
        "grouped": (lambda x, w, gs: fg.grouped_gemm(*fg.quantize_rowwise(x), *fg.quantize_blockwise(w), gs),
                    (x, jnp.stack([w, w]), sizes)),
        "fp8_dot": (fg.fp8_dot, (x, w_kn)),
        "ragged_dot": (fg.ragged_dot, (x, jnp.stack([w_kn, w_kn]), sizes)),
        "fp8_mlp": (fg.fp8_mlp, (x, w_kn, w)),
    }[pipeline.split()[0]]
    compiled = jax.jit(fn).lower(*args).compile().as_text()
    assert "fp8gemm_" in compiled
    assert not _layout_copies(compiled), _layout_copies(compiled)


GEMM_SHAPES = [
    # DeepGEMM's table
    (4096, 7168, 16384), (4096, 4096, 7168), (4096, 2112, 7168), (4096, 24576, 1536),
    (4096, 7168, 2048), (4096, 32768, 512), (128, 7168, 16384), (64, 2112, 7168),
    # odd shapes
    (1, 2112, 7168), (7, 4096, 512), (63, 24576, 1536), (129, 2112, 1552), (4095, 7168, 512),
    (300, 160, 144), (1000, 8, 128), (257, 1000, 272),
    # the first short-K twin in CTA pairs sharing A, as gemm_config picks it at M > 4096, N < 16384
    (6144, 11008, 384),
]


@pytest.mark.parametrize("m,n,k", GEMM_SHAPES)
@pytest.mark.parametrize("out_dtype", [jnp.bfloat16, jnp.float32])
def test_gemm_kernel(rng, m, n, k, out_dtype):
    x, w = randn(rng, (m, k), jnp.bfloat16), randn(rng, (n, k), jnp.bfloat16)
    a, a_s = fg.quantize_rowwise(x)
    b, b_s = fg.quantize_blockwise(w)
    gemm = jax.jit(fg.gemm, static_argnames="out_dtype")
    assert "fp8gemm_gemm" in gemm.lower(a, a_s, b, b_s, out_dtype=out_dtype).as_text()
    poison_allocator(m * n * 4)
    out = gemm(a, a_s, b, b_s, out_dtype=out_dtype)
    out_np = np.asarray(out.astype(jnp.float32))
    assert not np.isnan(out_np).any(), "unwritten (poisoned) or NaN outputs"
    # float64 reference of the dequantized operands: on rows/cols samples for the big shapes.
    rows = np.unique(rng.integers(0, m, min(m, 512)))
    ref = dequant64(a[rows], a_s[rows], False) @ dequant64(b, b_s, True).T
    assert calc_diff(out_np[rows], ref) <= 1e-5
    if m * n >= 4096:
        unq = (np.asarray(x[rows], np.float64) @ np.asarray(w, np.float64).T)
        assert calc_diff(out_np[rows], unq) <= 1e-3
    again = gemm(a, a_s, b, b_s, out_dtype=out_dtype)
    np.testing.assert_array_equal(np.asarray(again).view(np.uint8), np.asarray(out).view(np.uint8))


def check_dense_config(rng, m, n, k, config, out_dtype):
    """fg.gemm's kernel with an explicit configuration on fresh data: against the float64
    reference, every element written (poisoned first), the same bits on a second run."""
    a, a_s = fg.quantize_rowwise(randn(rng, (m, k), jnp.bfloat16))
    b, b_s = fg.quantize_blockwise(randn(rng, (n, k), jnp.bfloat16))
    fn = jax.jit(lambda *ops: gemm_kernel_call(*ops, config, out_dtype))
    poison_allocator(m * n * 4)
    out = np.asarray(fn(a, a_s, b, b_s).astype(jnp.float32))
    assert not np.isnan(out).any(), "unwritten (poisoned) or NaN outputs"
    assert calc_diff(out, dequant64(a, a_s, False) @ dequant64(b, b_s, True).T) <= 1e-5
    again = np.asarray(fn(a, a_s, b, b_s).astype(jnp.float32))
    np.testing.assert_array_equal(again.view(np.uint32), out.view(np.uint32))


GEMV_SHAPES = [(1, 2112, 7168), (2, 1000, 400), (3, 136, 16), (4, 8, 1552), (3, 7168, 2048), (1, 24576, 512),
               (8, 2112, 7168), (7, 1000, 400), (5, 264, 1008), (6, 2112, 16384)]
GEMV_KINDS = {"gemv": gemm_config.GEMV, "gemv mma": gemm_config.GEMV_MMA}


@pytest.mark.parametrize("kind,m,n,k", [(kind, *shape) for kind, config in GEMV_KINDS.items()
                                        for shape in GEMV_SHAPES if shape[0] <= config.block_m])
@pytest.mark.parametrize("out_dtype", [jnp.bfloat16, jnp.float32])
def test_gemv_kernel(rng, m, n, k, kind, out_dtype):
    """The decode GEMMs without a pipeline (gemm_config._pipeline_free), each on the shapes with M up
    to its block_m: on the CUDA cores (M <= 4) and on mma.sync (M <= 8, 1 / 2 / 4 / 8 warps per CTA
    from K: 400 / 1008 / 1552 / 7168; 16384: 4 steps of 4 k-blocks per warp). Partial k-blocks (400,
    16, 1552, 1008), N not a multiple of their 8 / 16 rows per CTA nor of 128 (1000, 136, 264), one
    k-block of one segment (K = 16)."""
    check_dense_config(rng, m, n, k, GEMV_KINDS[kind], out_dtype)


@pytest.mark.parametrize("m,n,k", [(1, 2112, 7168), (7, 1000, 1552), (64, 18432, 1536), (63, 400, 208),
                                   (16, 24576, 512)])
@pytest.mark.parametrize("out_dtype", [jnp.bfloat16, jnp.float32])
def test_decode_192_tile(rng, m, n, k, out_dtype):
    """The 64x192 decode tile (gemm_config._decode_block_n at N = 18432 / 24576): every other tile
    straddles two 128-wide B-scale blocks (its B scales staged per tile); the last N-block partial
    (1000, 400) or whole (2112 = 11 x 192, 18432, 24576); K not a multiple of 128 (1552, 208);
    M < 64 (the A rows past M are never loaded, their output rows clipped by the TMA store)."""
    config = gemm_config.GemmConfig(64, 192, 0, _kernels.num_sms(), 1)
    check_dense_config(rng, m, n, k, config, out_dtype)


@pytest.mark.parametrize("m,n,k", [(65, 2112, 1552), (100, 1000, 7168), (129, 272, 208), (190, 4096, 512)])
@pytest.mark.parametrize("block_n,multicast", [(32, 1), (64, 2), (128, 1), (192, 1)])
@pytest.mark.parametrize("out_dtype", [jnp.bfloat16, jnp.float32])
def test_decode_tiles_partial_last_m_block(rng, m, n, k, block_n, multicast, out_dtype):
    """64-row tiles over several M-blocks: the last, partial one starts at M - 64 rounded up to 4
    (DenseScheduler), so its rows overlap the previous block's, which both tiles store alike.
    M % 4 != 0 (65, 129: A's scales viewed flat), 1-36 rows in the last block, pairs sharing B
    across neighbouring M-blocks (multicast 2), a tile straddling B-scale blocks (192)."""
    config = gemm_config.GemmConfig(64, block_n, 0, _kernels.num_sms(), multicast)
    check_dense_config(rng, m, n, k, config, out_dtype)


def test_split_k_cluster_capacity():
    """CUDA's answer to "how many clusters of S split-K CTAs fit at once", which bounds the picker's
    splits: at least one cluster, never more CTAs than SMs, fewer clusters as they grow, 0 past
    the compiled splits and on a tile without split-K. The decode shapes' picks fit it."""
    sms = _kernels.num_sms()
    for block_m, block_n in gemm_config.SPLIT_K_TILES:
        clusters = [_kernels.max_active_split_k_clusters(block_m, block_n, s) for s in range(1, 5)]
        assert clusters[0] == sms, clusters
        assert all(1 <= c and c * s <= sms for s, c in enumerate(clusters, 1)), clusters
        assert clusters == sorted(clusters, reverse=True), clusters
        assert _kernels.max_active_split_k_clusters(block_m, block_n, 5) == 0
    assert _kernels.max_active_split_k_clusters(64, 128, 2) == 0
    assert _kernels.max_active_split_k_clusters(128, 128, 2) == 0
    for m, n in itertools.product((16, 96), (576, 1024, 1536, 2112, 4096)):
        c = gemm_config.pick(m, n, 7168, jnp.bfloat16, sms, _kernels.max_active_split_k_clusters)
        if m <= 64:
            assert c.k_splits > 1, c  # all of these leave SMs idle unsplit
        tiles = -(-m // c.block_m) * -(-n // c.block_n)
        assert tiles <= _kernels.max_active_split_k_clusters(c.block_m, c.block_n, c.k_splits), c


@pytest.mark.parametrize("m,n,k", [(1, 2112, 7168), (7, 1000, 1552), (64, 272, 208), (63, 2112, 4112),
                                   (77, 1000, 1552), (96, 2112, 7168), (128, 272, 208), (129, 1000, 1552)])
@pytest.mark.parametrize("block_m,block_n,k_splits", [(64, 32, 2), (64, 32, 3), (64, 64, 3), (64, 64, 4),
                                                      (128, 32, 2), (128, 32, 4), (128, 64, 3)])
@pytest.mark.parametrize("out_dtype", [jnp.bfloat16, jnp.float32])
def test_gemm_split_k_kernel(rng, m, n, k, block_m, block_n, k_splits, out_dtype):
    """Split-K decode tiles (clusters adding their partials through distributed shared memory):
    M % 4 != 0 (64-row tiles: A's scales viewed flat, each rank's box at its own k-block), K not a
    multiple of 128, fewer k-blocks than ranks (empty k-ranges: 208 = 2 k-blocks), partial N-blocks,
    several M-blocks (64-row tiles at 96: two, as `pick` splits M = 65..128; 129: a last one of a
    row), and the 128-row tiles' two math warpgroups sending and owning rows across both halves,
    also where M fills one of them only (1, 7, 63, 64) or part of the second (77, 96)."""
    config = gemm_config.GemmConfig(block_m, block_n, 0, _kernels.num_sms(), 1, k_splits=k_splits)
    check_dense_config(rng, m, n, k, config, out_dtype)


@pytest.mark.parametrize("k", [16, 208, 256, 384, 400, 512, 528, 768, 1008, 1024, 1040, 1424, 1536, 1552,
                               2048, 4096, 4112])
@pytest.mark.parametrize("multicast,multicast_a", [(1, 0), (2, 0), (2, 1)])
def test_256x128_short_k(rng, k, multicast, multicast_a):
    """The 256x128 tile's K-bound kernels, launched instead of the loop kernel when K fits: the
    short-K twins (1-4 k-blocks, K <= 512; 5-8; 9-12, K <= 1536; straight-line k-loops whose last
    k-block stores wave 0's slice itself), the last two with posted tiles, and the posted loop
    kernel (13-32 k-blocks: 1552 to 4096, on these few tiles; 4112 is the first on the unposted
    loop kernel). The fourth twin: test_256x128_fourth_twin. Two full
    two-wave tiles and a one-wave one per N-block (M = 600 = 256 + 256 + 88), a partial last
    N-block (N = 1160), K not a multiple of 128. bf16 output: the 256-row tiles serve bf16 only."""
    config = gemm_config.GemmConfig(256, 128, 0, _kernels.num_sms(), multicast, multicast_a)
    check_dense_config(rng, 600, 1160, k, config, jnp.bfloat16)


@pytest.mark.parametrize("k", [1552, 1936, 2048])
@pytest.mark.parametrize("multicast,multicast_a", [(1, 0), (2, 0), (2, 1)])
def test_256x128_fourth_twin(rng, k, multicast, multicast_a):
    """The fourth short-K twin (13-16 k-blocks), launched only where the tiles fill 20 waves of the
    SMs: 81 tiles (3 M-blocks, the last of 88 rows, x 27 N-blocks, the last partial) on 4 SMs."""
    config = gemm_config.GemmConfig(256, 128, 0, 4, multicast, multicast_a)
    check_dense_config(rng, 600, 3400, k, config, jnp.bfloat16)


@pytest.mark.parametrize("m,n,k", [(300, 2112, 1552), (129, 1000, 208), (256, 528, 7168)])
@pytest.mark.parametrize("multicast,multicast_a", [(1, 0), (2, 0), (2, 1)])
@pytest.mark.parametrize("out_dtype", [jnp.bfloat16, jnp.float32])
def test_128x176_three_scale_blocks(rng, m, n, k, multicast, multicast_a, out_dtype):
    """The 128x176 tile (gemm_config.pick's at 4096x2112): tiles starting 96 or 112 columns into a
    128-wide B-scale block touch three of them (352..527: blocks 2, 3, 4), the only tile that does.
    N = 2112 (12 whole N-blocks), 1000 (a partial last one whose third block lies past N) and 528
    (the three-block tile ends at N); K not a multiple of 128 (1552, 208); a partial last M-block
    (300, 129); pairs sharing A or B."""
    config = gemm_config.GemmConfig(128, 176, 0, _kernels.num_sms(), multicast, multicast_a)
    check_dense_config(rng, m, n, k, config, out_dtype)


# The wgrad kernels against float64: FP32 accumulation gives ~8e-9 on every tile. SPEC's 1e-5 let
# through scale products of bf16 precision on the 256x96 tile (5.4e-6; session 47), so these tests
# hold the kernels to what they measure.
WGRAD_CALC_DIFF = 1e-7


def check_256_row_configs(rng, kind, m, n, k, configs):
    """The 256-row forward (bf16 out) or dense wgrad (f32 out, K = tokens) kernel under each of
    `configs` on one fresh problem: the first against the float64 reference, every element written
    (poisoned first), and the others bit for bit the same as the first."""
    a, a_s = fg.quantize_rowwise(randn(rng, (m, k), jnp.bfloat16))
    if kind == "gemm":
        b, b_s = fg.quantize_blockwise(randn(rng, (n, k), jnp.bfloat16))
        call, out_dtype, b_blockwise = gemm_kernel_call, jnp.bfloat16, True
    else:
        b, b_s = fg.quantize_rowwise(randn(rng, (n, k), jnp.bfloat16))
        call, out_dtype, b_blockwise = gemm_wgrad_kernel_call, jnp.float32, False
    outs = []
    for config in configs:
        poison_allocator(m * n * 4)
        fn = jax.jit(lambda *ops, config=config: call(*ops, config, out_dtype))
        outs.append(np.asarray(fn(a, a_s, b, b_s).astype(jnp.float32)))
    assert not np.isnan(outs[0]).any(), "unwritten (poisoned) or NaN outputs"
    ref = dequant64(a, a_s, False) @ dequant64(b, b_s, b_blockwise).T
    assert calc_diff(outs[0], ref) <= (1e-5 if kind == "gemm" else WGRAD_CALC_DIFF)
    for other in outs[1:]:
        np.testing.assert_array_equal(other.view(np.uint32), outs[0].view(np.uint32))


@pytest.mark.parametrize("kind", ["gemm", "wgrad", "wgrad 256x96"])
@pytest.mark.parametrize("m,n,k", [(1000, 2112, 1552), (4095, 7040, 2048), (257, 1000, 7168)])
def test_256_row_tile_pairs_sharing_a(rng, kind, m, n, k):
    """The 256-row tiles in CTA pairs that share A by TMA multicast (what the pickers take for long
    K), forward (bf16 out) and dense wgrad (f32 out, K = tokens; 256x128, and 256x96 with its scale
    products on the tensor cores): odd N-block counts (17, 55: the last band splits off a tile
    without a peer), partial M-blocks, K not a multiple of 128. Multicast only changes who loads A,
    so the result must be bit for bit the unpaired kernel's, and match the float64 reference."""
    block_n = 96 if kind == "wgrad 256x96" else 128
    paired = gemm_config.GemmConfig(256, block_n, 0, _kernels.num_sms(), 2, multicast_a=1)
    base = gemm_config.GemmConfig(256, block_n, 0, _kernels.num_sms(), 1)
    check_256_row_configs(rng, kind, m, n, k, (paired, base))


@pytest.mark.parametrize("kind,k", [("gemm", 1552), ("gemm", 400), ("wgrad", 1552), ("wgrad 256x96", 1552)])
@pytest.mark.parametrize("m", [1024, 1000])
@pytest.mark.parametrize("multicast,multicast_a", [(1, 0), (2, 1), (2, 0)])
def test_256_row_tile_halved_tail(rng, kind, k, m, multicast, multicast_a):
    """The 256-row tiles' halved tail (DenseSchedulerParams::tail_tiles): on 12 CTAs, 4 M-blocks x
    10 N-blocks (13 for 256x96) leave a last wave of 4 tiles, which run as 8 halves of 128 rows on
    the kernel's one-wave path. M = 1000: the last M-block's second half has 104 rows. Forward
    (K = 1552, and 400: the short-K twin) and dense wgrad; unpaired and in pairs sharing A or B.
    Against float64, and bit for bit the same as one wave of whole tiles on enough CTAs."""
    n = 1160
    block_n = 96 if kind == "wgrad 256x96" else 128
    tiles = cdiv(m, 256) * cdiv(n, block_n)
    assert gemm_config.halved_tail_tiles(m, tiles, 256, 12, multicast == 2) == 4
    assert tiles <= _kernels.num_sms(), "the whole-tile run needs one wave"
    configs = [gemm_config.GemmConfig(256, block_n, 0, sms, multicast, multicast_a) for sms in (12, _kernels.num_sms())]
    check_256_row_configs(rng, kind, m, n, k, configs)


@pytest.mark.parametrize("block_n,n", [(128, 1024), (96, 1152)])
def test_k_grouped_wgrad_pairs_sharing_a(rng, block_n, n):
    """The k-grouped wgrad's 256-row tiles in CTA pairs sharing A (8 / 12 N-blocks: pairs of one
    group; 256x96 with its scale products on the tensor cores): unaligned, uneven and empty
    groups, tokens past the last group, a partial last M-block. Bit for bit the unpaired kernel,
    and the float64 reference group by group."""
    m, t, sizes = 1000, 4112, [1000, 0, 141, 1200, 255, 3, 760, 737]
    a, a_s = fg.quantize_rowwise(randn(rng, (m, t), jnp.bfloat16))
    b, b_s = fg.quantize_rowwise(randn(rng, (n, t), jnp.bfloat16))
    gs = jnp.asarray(sizes, jnp.int32)
    base = gemm_config.GemmConfig(256, block_n, 0, _kernels.num_sms(), 1)
    paired = gemm_config.GemmConfig(256, block_n, 0, _kernels.num_sms(), 2, multicast_a=1)
    outs = []
    for config in (paired, base):
        poison_allocator(len(sizes) * m * n * 4)
        fn = jax.jit(lambda *ops, config=config: grouped_gemm_wgrad_kernel_call(*ops, config))
        outs.append(np.asarray(fn(a, a_s, b, b_s, gs)))
    assert not np.isnan(outs[0]).any(), "unwritten (poisoned) or NaN outputs"
    af, bf = dequant64(a, a_s, False), dequant64(b, b_s, False)
    ends = np.cumsum(sizes)
    for g, (lo, hi) in enumerate(zip(np.concatenate([[0], ends[:-1]]), ends)):
        if lo == hi:
            assert np.all(outs[0][g] == 0), f"group {g} is empty"
        else:
            assert calc_diff(outs[0][g], af[:, lo:hi] @ bf[:, lo:hi].T) <= WGRAD_CALC_DIFF, f"group {g}"
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))


def test_gemm_batched_and_vmapped_kernel(rng):
    a, a_s = fg.quantize_rowwise(randn(rng, (3, 100, 512), jnp.bfloat16))
    b, b_s = fg.quantize_blockwise(randn(rng, (256, 512), jnp.bfloat16))
    out = jax.jit(jax.vmap(fg.gemm, in_axes=(0, 0, None, None)))(a, a_s, b, b_s)
    ref = jax.jit(jax.vmap(fg.reference.gemm, in_axes=(0, 0, None, None)))(a, a_s, b, b_s)
    assert calc_diff(out, ref) <= 1e-5


GROUPED_CASES = [
    # (M, N, K, sizes): uneven + empty groups, tail rows, clamped sums, negative sizes, G = 1,
    # groups smaller than a tile, ragged N and K
    (300, 272, 1552, [100, 0, 150, 37]),
    (200, 128, 256, [-5, 120, 500]),
    (129, 256, 512, [129]),
    (129, 256, 512, [64]),
    (1000, 384, 1024, [1, 63, 64, 65, 127, 128, 129, 0, 200]),
    (4096, 4096, 7168, [700, 0, 1300, 96, 2000]),
]


@pytest.mark.parametrize("m,n,k,sizes", GROUPED_CASES)
@pytest.mark.parametrize("out_dtype", [jnp.bfloat16, jnp.float32])
def test_grouped_gemm_kernel(rng, m, n, k, sizes, out_dtype):
    g = len(sizes)
    a, a_s = fg.quantize_rowwise(randn(rng, (m, k), jnp.bfloat16))
    b, b_s = fg.quantize_blockwise(randn(rng, (g, n, k), jnp.bfloat16))
    gs = jnp.asarray(sizes, jnp.int32)
    fn = jax.jit(fg.grouped_gemm, static_argnames="out_dtype")
    assert "fp8gemm_grouped_gemm" in fn.lower(a, a_s, b, b_s, gs, out_dtype=out_dtype).as_text()
    poison_allocator(m * n * 4)
    out = fn(a, a_s, b, b_s, gs, out_dtype=out_dtype)
    out_np = np.asarray(out.astype(jnp.float32))
    ref, total = grouped_reference64(a, a_s, b, b_s, sizes)
    assert not np.isnan(out_np).any(), "unwritten (poisoned) or NaN outputs"
    assert np.all(out_np[total:] == 0), "rows past the sum of the group sizes must be zero"
    assert calc_diff(out_np, ref) <= 1e-5
    # per element: a row computed with the wrong group's weights is off by about its RMS; the
    # kernel's own error is under 0.2% of it, plus half an ulp of bf16 output (2^-8 of the value:
    # a bound per row, 2% of the RMS, could be crossed by rounding alone; tools/stress_repeat.py)
    rms = np.sqrt((ref * ref).mean(axis=1, keepdims=True))
    allowed = 1e-2 * rms + (2.0**-8 * np.abs(ref) if out_dtype == jnp.bfloat16 else 0.0)
    rows_off = np.nonzero((np.abs(out_np - ref) > allowed).any(axis=1))[0]
    assert rows_off.size == 0, f"rows off: {rows_off[:10]}"
    again = fn(a, a_s, b, b_s, gs, out_dtype=out_dtype)
    np.testing.assert_array_equal(np.asarray(again).view(np.uint8), np.asarray(out).view(np.uint8))


def test_grouped_gemm_kernel_sizes_are_runtime_values(rng):
    """One compiled executable, different sizes (device values, no recompilation, no host sync)."""
    m, n, k, g = 512, 256, 384, 5
    a, a_s = fg.quantize_rowwise(randn(rng, (m, k), jnp.bfloat16))
    b, b_s = fg.quantize_blockwise(randn(rng, (g, n, k), jnp.bfloat16))
    fn = jax.jit(lambda *args: fg.grouped_gemm(*args))
    for sizes in ([100, 100, 100, 100, 112], [0, 0, 0, 0, 0], [600, -1, 3, 0, 9], [1, 2, 3, 4, 5]):
        out = np.asarray(fn(a, a_s, b, b_s, jnp.asarray(sizes, jnp.int32)).astype(jnp.float32))
        ref, total = grouped_reference64(a, a_s, b, b_s, sizes)
        assert np.all(out[total:] == 0) and not np.isnan(out).any()
        if total:
            assert calc_diff(out[:total], ref[:total]) <= 1e-5
    assert fn._cache_size() == 1  # compiled once


@pytest.mark.parametrize("g,mmax,n,k,masked_m", [
    (4, 100, 272, 1552, [0, 100, 37, 250]),
    (3, 64, 256, 512, [64, 0, -1]),
    (2, 512, 4096, 7168, [512, 300]),
    (8, 40, 136, 400, [40, 1, 0, 13, 39, 41, 20, 7]),
])
@pytest.mark.parametrize("out_dtype", [jnp.bfloat16, jnp.float32])
def test_grouped_gemm_masked_kernel(rng, g, mmax, n, k, masked_m, out_dtype):
    a, a_s = fg.quantize_rowwise(randn(rng, (g, mmax, k), jnp.bfloat16))
    b, b_s = fg.quantize_blockwise(randn(rng, (g, n, k), jnp.bfloat16))
    mm = jnp.asarray(masked_m, jnp.int32)
    fn = jax.jit(fg.grouped_gemm_masked, static_argnames="out_dtype")
    assert "fp8gemm_grouped_gemm_masked" in fn.lower(a, a_s, b, b_s, mm, out_dtype=out_dtype).as_text()
    poison_allocator(g * mmax * n * 4)
    out = np.asarray(fn(a, a_s, b, b_s, mm, out_dtype=out_dtype).astype(jnp.float32))
    assert out.shape == (g, mmax, n) and not np.isnan(out).any()
    af, bf = dequant64(a, a_s, False), dequant64(b, b_s, True)
    for i, rows in enumerate(masked_m):
        rows = max(0, min(rows, mmax))
        assert np.all(out[i, rows:] == 0), f"group {i}: rows >= masked_m must be zero"
        if rows:
            assert calc_diff(out[i, :rows], af[i, :rows] @ bf[i].T) <= 1e-5
    again = np.asarray(fn(a, a_s, b, b_s, mm, out_dtype=out_dtype).astype(jnp.float32))
    np.testing.assert_array_equal(again.view(np.uint32), out.view(np.uint32))


WGRAD_CASES = [
    (200, 264, 400, None),                               # dense: T % 128 != 0, ragged M and N
    (1024, 2048, 8192, None),
    (1000, 2600, 528, None),                             # dense 256x96 (scale products on the tensor cores)
    (136, 144, 1040, [50, 0, 130, 1, 16, 300, 7, 200]),  # k-grouped: groups inside 128-token blocks
    (72, 112, 400, [-3, 17, 33, 64, 1, 500]),            # several groups per block; clamped sizes
    (520, 776, 4096, [1000, 0, 141, 1200, 255, 3, 760, 737]),  # k-grouped 256x96
    (256, 384, 4096, [4096]),                            # G = 1
]


@pytest.mark.parametrize("m,n,t,sizes", WGRAD_CASES)
def test_wgrad_kernels(rng, m, n, t, sizes):
    """Dense and k-grouped wgrad (tokens contracted, 1x128 scales along them on both operands)
    against float64 of the dequantized operands, group by group over unpadded token ranges."""
    a, a_s = fg.quantize_rowwise(randn(rng, (m, t), jnp.bfloat16))
    b, b_s = fg.quantize_rowwise(randn(rng, (n, t), jnp.bfloat16))
    af, bf = dequant64(a, a_s, False), dequant64(b, b_s, False)
    if sizes is None:
        op, args, name = fg.gemm_wgrad, (a, a_s, b, b_s), "fp8gemm_gemm_wgrad"
        bounds = [(0, t)]
    else:
        gs = jnp.asarray(sizes, jnp.int32)
        op, args, name = fg.grouped_gemm_wgrad, (a, a_s, b, b_s, gs), "fp8gemm_grouped_gemm_wgrad"
        ends = np.minimum(np.cumsum(np.maximum(sizes, 0)), t)
        bounds = list(zip(np.concatenate([[0], ends[:-1]]), ends))
    fn = jax.jit(op)
    assert name in fn.lower(*args).as_text()
    poison_allocator(len(bounds) * m * n * 4)
    out = np.asarray(fn(*args)).reshape(len(bounds), m, n)
    assert not np.isnan(out).any(), "unwritten (poisoned) or NaN outputs"
    for g, (lo, hi) in enumerate(bounds):
        if lo == hi:
            assert np.all(out[g] == 0), f"group {g} is empty: its gradient must be zero"
        else:
            assert calc_diff(out[g], af[:, lo:hi] @ bf[:, lo:hi].T) <= WGRAD_CALC_DIFF, f"group {g}"
    again = np.asarray(fn(*args)).reshape(out.shape)
    np.testing.assert_array_equal(again.view(np.uint32), out.view(np.uint32))
    # bf16 output (a bf16 weight's gradient): the kernel rounds the same FP32 accumulator once,
    # so it is exactly the FP32 result converted (n % 8 == 0 for the bf16 kernel; else the op
    # converts the FP32 kernel's output, which is the same by construction).
    poison_allocator(len(bounds) * m * n * 2)
    out16 = jax.jit(lambda *v: op(*v, out_dtype=jnp.bfloat16))(*args)
    assert out16.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(out16).reshape(out.shape).view(np.uint16),
                                  np.asarray(jnp.asarray(out).astype(jnp.bfloat16)).view(np.uint16))


_COMMAND_BUFFER_SCRIPT = r'''
import jax, jax.numpy as jnp, numpy as np
import importlib
import jax_fp8gemm as fg
from jax_fp8gemm import _kernels, gemm_config
grouped = importlib.import_module("jax_fp8gemm.grouped")

def calc_diff(x, y):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return 1 - 2 * np.sum(x * y) / np.sum(x * x + y * y)

key = jax.random.key(0)
g, m, n, k = 4, 512, 256, 512
a, a_s = fg.quantize_rowwise(jax.random.normal(key, (m, k)))
b, b_s = fg.quantize_blockwise(jax.random.normal(jax.random.key(1), (g, n, k)))
am, am_s = fg.quantize_rowwise(jax.random.normal(key, (g, 64, k)))
w2, w2_s = fg.quantize_blockwise(jax.random.normal(jax.random.key(2), (128, n)))

# The 256-row tile (bf16 out) takes its tiles from a counter the launch zeroes: on every replay.
tile256 = gemm_config.GemmConfig(256, 128, 0, _kernels.num_sms(), 1)

@jax.jit
def step(sizes, masked_m):
    y = fg.grouped_gemm(a, a_s, b, b_s, sizes, out_dtype=jnp.float32)
    y256 = grouped.grouped_gemm_kernel_call(a, a_s, b, b_s, sizes, tile256, jnp.bfloat16)
    z = fg.grouped_gemm_masked(am, am_s, b, b_s, masked_m, out_dtype=jnp.float32)
    x, x_s = fg.quantize_rowwise(y)
    return y, y256, z, fg.gemm(x, x_s, w2, w2_s, out_dtype=jnp.float32)

text = step.lower(jnp.zeros((g,), jnp.int32), jnp.zeros((g,), jnp.int32)).compile().as_text()
print("COMMAND_BUFFER" if "command_buffer" in text else "NO_COMMAND_BUFFER")
for sizes, mm in [([100, 0, 250, 62], [64, 0, 10, 99]), ([7, 300, 0, 205], [1, 64, 33, 0])]:
    sizes, mm = jnp.asarray(sizes, jnp.int32), jnp.asarray(mm, jnp.int32)
    y, y256, z, w = step(sizes, mm)
    ry = fg.reference.grouped_gemm(a, a_s, b, b_s, sizes, jnp.float32)
    rz = fg.reference.grouped_gemm_masked(am, am_s, b, b_s, mm, jnp.float32)
    assert calc_diff(y, ry) <= 1e-5 and calc_diff(z, rz) <= 1e-5, (calc_diff(y, ry), calc_diff(z, rz))
    assert calc_diff(y256.astype(jnp.float32), ry) <= 1e-5, calc_diff(y256.astype(jnp.float32), ry)
    assert np.all(np.asarray(y)[int(sizes.sum()):] == 0)
    assert np.all(np.asarray(y256.astype(jnp.float32))[int(sizes.sum()):] == 0)

# The fused activation quantizers run persistent, with more tiles than resident CTAs; their first
# launch (which sizes the grid) happens while the command buffer is recorded.
u = (3 * jax.random.normal(jax.random.key(3), (4096, 2048))).astype(jnp.bfloat16)
dy = jax.random.normal(jax.random.key(4), (4096, 2048)).astype(jnp.bfloat16)
fused = lambda dy, u: (fg.quantize_rowwise_transpose(u, activation="gelu"),
                       fg.quantize_rowwise_transpose_act_grad(dy, u, "gelu"))
assert "command_buffer" in jax.jit(fused).lower(dy, u).compile().as_text()
got = jax.tree.leaves(jax.jit(fused)(dy, u))
cpu = jax.devices("cpu")[0]
want = jax.tree.leaves(jax.jit(fused)(jax.device_put(dy, cpu), jax.device_put(u, cpu)))
for q, wq in zip(got[0::2], want[0::2]):  # (q, s, qt, st) per op: FP8 bytes, then scales
    assert np.mean(np.asarray(q).view(np.uint8) != np.asarray(wq).view(np.uint8)) < 1e-3
for s, ws in zip(got[1::2], want[1::2]):
    np.testing.assert_allclose(np.asarray(s), np.asarray(ws), rtol=1e-2)
print("OK")
'''


def test_kernels_inside_xla_command_buffer(tmp_path):
    """The FFI custom calls run inside an XLA command buffer (a CUDA graph), replayed with new
    group sizes in device memory: no host sync, right results. The fused activation quantizers
    too (persistent grid sized at their first launch, inside the recording)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # this test process already holds most of it
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_gpu_enable_command_buffer=+CUSTOM_CALL"
                        " --xla_gpu_graph_min_graph_size=1").strip()
    script = tmp_path / "command_buffer.py"
    script.write_text(_COMMAND_BUFFER_SCRIPT)
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                         timeout=300, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "COMMAND_BUFFER" in out.stdout.split(), out.stdout
    assert out.stdout.strip().endswith("OK")


def test_exported_program_runs_the_kernels(rng):
    """A program exported with fg.export_disabled_checks(), serialized and deserialized, calls the
    kernels on the GPU and gives bitwise what the jitted program does (FP8 training step of
    fp8_dot and ragged_dot: forward and both gradients)."""
    x = randn(rng, (1000, 512), jnp.bfloat16)
    w, w3 = randn(rng, (512, 768), jnp.float32), randn(rng, (3, 512, 768), jnp.float32)
    sizes = jnp.asarray([300, 0, 640], jnp.int32)
    loss = lambda f: lambda *a: jnp.sum(f(*a).astype(jnp.float32) ** 2)
    for fn, args, target in [(jax.grad(loss(fg.fp8_dot), argnums=(0, 1)), (x, w), "fp8gemm_gemm_wgrad"),
                             (jax.grad(loss(fg.ragged_dot), argnums=(0, 1)), (x, w3, sizes),
                              "fp8gemm_grouped_gemm_wgrad")]:
        exported = jax.export.export(jax.jit(fn), disabled_checks=fg.export_disabled_checks())(*args)
        assert f"@{target}(" in exported.mlir_module()
        try:
            exported = jax.export.deserialize(exported.serialize())
        except ImportError:  # serialization needs flatbuffers; the call is what is tested here
            pass
        f32 = lambda outs: [o.astype(jnp.float32) for o in outs]  # bf16 -> f32 is exact
        assert_bitwise(f32(exported.call(*args)), f32(jax.jit(fn)(*args)))
