"""Dense and grouped GEMMs on the reference path (every backend): numerics against float64,
ragged/masked semantics with clamping, transforms and argument errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import calc_diff, dequant64, grouped_reference64, quantized, randn

import jax_fp8gemm as fg


def ref_dense(a, a_s, b, b_s):
    return dequant64(a, a_s, False) @ dequant64(b, b_s, True).swapaxes(-1, -2)


@pytest.mark.parametrize("m,n,k", [(1, 8, 128), (7, 40, 144), (129, 264, 512), (64, 128, 400), (200, 136, 1024)])
@pytest.mark.parametrize("out_dtype", [jnp.bfloat16, jnp.float32])
def test_gemm_matches_float64(rng, m, n, k, out_dtype):
    x, w = randn(rng, (m, k)), randn(rng, (n, k))
    a, a_s = fg.quantize_rowwise(x)
    b, b_s = fg.quantize_blockwise(w)
    out = jax.jit(fg.gemm, static_argnames="out_dtype")(a, a_s, b, b_s, out_dtype=out_dtype)
    assert out.shape == (m, n) and out.dtype == out_dtype
    assert calc_diff(out, ref_dense(a, a_s, b, b_s)) <= 1e-5
    if m * n < 4096:
        return  # the bar below is statistical: a handful of outputs can miss it by chance
    # Against the unquantized product (DeepGEMM's bar).
    unq = np.asarray(x.astype(jnp.bfloat16), np.float64) @ np.asarray(w.astype(jnp.bfloat16), np.float64).T
    assert calc_diff(out, unq) <= 1e-3


def test_operands_quantized_with_align_take_any_k(rng):
    """K = 200 (not a multiple of 16): operands quantized with align=32 (K zero-padded to 224)
    give the product of the unpadded quantized operands; the grouped GEMM too."""
    x, w = randn(rng, (64, 200)), randn(rng, (2, 48, 200))
    a, a_s = fg.quantize_rowwise(x, align=32)
    b, b_s = fg.quantize_blockwise(w, align=32)
    assert a.shape == (64, 224) and b.shape == (2, 48, 224)
    want = [ref_dense(*fg.quantize_rowwise(x), *fg.quantize_blockwise(w[g])) for g in (0, 1)]
    assert calc_diff(fg.gemm(a, a_s, b[0], b_s[0]), want[0]) <= 1e-5
    out = fg.grouped_gemm(a, a_s, b, b_s, jnp.array([40, 24], jnp.int32))
    assert calc_diff(out, np.concatenate([want[0][:40], want[1][40:]])) <= 1e-5


def test_gemm_leading_axes_and_vmap(rng):
    a, a_s, b, b_s = quantized(rng, (2, 3, 5, 256), (48, 256))
    out = fg.gemm(a, a_s, b, b_s)
    assert out.shape == (2, 3, 5, 48)
    assert calc_diff(out, ref_dense(a, a_s, b, b_s)) <= 1e-5
    flat = fg.gemm(a.reshape(30, 256), a_s.reshape(30, 2), b, b_s).reshape(2, 3, 5, 48)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(flat))
    # vmap over a folds into M; over b becomes the masked grouped GEMM; over both, too.
    a2, a2_s = a[0, 0], a_s[0, 0]
    bw, bw_s = fg.quantize_blockwise(randn(rng, (4, 48, 256)))
    v_a = jax.vmap(fg.gemm, in_axes=(1, 1, None, None), out_axes=1)(a[0], a_s[0], b, b_s)
    np.testing.assert_array_equal(np.asarray(v_a), np.asarray(out[0]))
    v_b = jax.jit(jax.vmap(fg.gemm, in_axes=(None, None, 0, 0)))(a2, a2_s, bw, bw_s)
    for i in range(4):
        assert calc_diff(v_b[i], ref_dense(a2, a2_s, bw[i], bw_s[i])) <= 1e-5
    aa, aa_s = fg.quantize_rowwise(randn(rng, (4, 5, 256)))
    v_ab = jax.vmap(fg.gemm)(aa, aa_s, bw, bw_s)
    for i in range(4):
        assert calc_diff(v_ab[i], ref_dense(aa[i], aa_s[i], bw[i], bw_s[i])) <= 1e-5


def numpy_grouped(a, a_s, b, b_s, sizes):
    return grouped_reference64(a, a_s, b, b_s, sizes)[0]


@pytest.mark.parametrize("sizes", [
    [40, 0, 17, 71],      # uneven, an empty group, sum == M
    [10, 5, 0, 3],        # sum < M: the remaining rows are zero
    [100, 50, 60, 30],    # sum > M: clamped at M
    [-5, 64, 200, 0],     # negative counts as 0
    [128],                # G = 1
])
def test_grouped_gemm(rng, sizes):
    g, m, n, k = len(sizes), 128, 72, 256
    a, a_s, b, b_s = quantized(rng, (m, k), (g, n, k))
    gs = jnp.asarray(sizes, jnp.int32)
    out = jax.jit(fg.grouped_gemm, static_argnames="out_dtype")(a, a_s, b, b_s, gs,
                                                                out_dtype=jnp.float32)
    ref = numpy_grouped(a, a_s, b, b_s, sizes)
    assert out.shape == (m, n)
    assert calc_diff(out, ref) <= 1e-5
    total = min(m, sum(max(0, s) for s in sizes))
    assert np.all(np.asarray(out)[total:] == 0)


def test_grouped_gemm_random_many_groups(rng):
    g, m, n, k = 32, 300, 64, 128
    sizes = rng.multinomial(m - 20, np.ones(g) / g)
    sizes[rng.integers(0, g, 4)] = 0
    a, a_s, b, b_s = quantized(rng, (m, k), (g, n, k))
    out = fg.grouped_gemm(a, a_s, b, b_s, jnp.asarray(sizes, jnp.int32))
    assert calc_diff(out, numpy_grouped(a, a_s, b, b_s, sizes)) <= 1e-5


def test_grouped_gemm_masked(rng):
    g, mmax, n, k = 4, 40, 56, 384
    a, a_s, b, b_s = quantized(rng, (g, mmax, k), (g, n, k))
    masked_m = jnp.asarray([40, 0, 13, 99], jnp.int32)  # 99 > Mmax is clamped
    out = jax.jit(fg.grouped_gemm_masked)(a, a_s, b, b_s, masked_m)
    assert out.shape == (g, mmax, n) and out.dtype == jnp.bfloat16
    af, bf = dequant64(a, a_s, False), dequant64(b, b_s, True)
    for i, rows in enumerate([40, 0, 13, 40]):
        ref = np.zeros((mmax, n))
        ref[:rows] = af[i, :rows] @ bf[i].T
        assert calc_diff(out[i], ref) <= 1e-5
        assert np.all(np.asarray(out[i, rows:]) == 0)


def test_grouped_vmap(rng):
    g, m, n, k = 3, 32, 24, 128
    a, a_s = fg.quantize_rowwise(randn(rng, (2, m, k)))
    _, _, b, b_s = quantized(rng, (m, k), (g, n, k))
    sizes = jnp.asarray([[10, 0, 22], [5, 5, 5]], jnp.int32)
    out = jax.vmap(fg.grouped_gemm, in_axes=(0, 0, None, None, 0))(a, a_s, b, b_s, sizes)
    for i in range(2):
        assert calc_diff(out[i], numpy_grouped(a[i], a_s[i], b, b_s, sizes[i])) <= 1e-5
    am, am_s = fg.quantize_rowwise(randn(rng, (2, g, 8, k)))
    mm = jnp.asarray([[8, 1, 0], [3, 8, 2]], jnp.int32)
    outm = jax.vmap(fg.grouped_gemm_masked, in_axes=(0, 0, None, None, 0))(am, am_s, b, b_s, mm)
    np.testing.assert_array_equal(np.asarray(outm[1]),
                                  np.asarray(fg.grouped_gemm_masked(am[1], am_s[1], b, b_s, mm[1])))


def _operands(m=16, n=32, k=256, g=None):
    a = jnp.zeros((m, k), jnp.float8_e4m3fn)
    a_s = jnp.ones((m, k // 128 + (k % 128 > 0)), jnp.float32)
    bshape = (n, k) if g is None else (g, n, k)
    b = jnp.zeros(bshape, jnp.float8_e4m3fn)
    b_s = jnp.ones((*bshape[:-2], -(-n // 128), -(-k // 128)), jnp.float32)
    return a, a_s, b, b_s


@pytest.mark.parametrize("mutate,exc,pattern", [
    (lambda a, a_s, b, b_s: (a.astype(jnp.bfloat16), a_s, b, b_s), TypeError,
     r"gemm: a must have dtype float8_e4m3fn, got bfloat16"),
    (lambda a, a_s, b, b_s: (a, a_s, b.astype(jnp.float32), b_s), TypeError,
     r"gemm: b must have dtype float8_e4m3fn"),
    (lambda a, a_s, b, b_s: (a, a_s, b[:, :128], b_s[:, :1]), ValueError,
     r"gemm: K \(last axis\) of a \(256\) and b \(128\) must match"),
    (lambda a, a_s, b, b_s: (a, a_s[:, :1], b, b_s), ValueError,
     r"gemm: a_s must have shape \(16, 2\), got \(16, 1\)"),
    (lambda a, a_s, b, b_s: (a, a_s.astype(jnp.bfloat16), b, b_s), TypeError,
     r"gemm: a_s must have dtype float32"),
    (lambda a, a_s, b, b_s: (a, a_s, b, b_s.T), ValueError,
     r"gemm: b_s must have shape \(1, 2\), got \(2, 1\)"),
    (lambda a, a_s, b, b_s: (a[:, :200], a_s, b[:, :200], b_s), ValueError,
     r"gemm: K \(the contracted axis, 200\) must be a multiple of 16"),
    (lambda a, a_s, b, b_s: (a, a_s, b[None], b_s[None]), ValueError,
     r"gemm: b must be \[N, K\] \(rank 2\), got shape \(1, 32, 256\)"),
])
def test_gemm_errors(mutate, exc, pattern):
    with pytest.raises(exc, match=pattern):
        jax.jit(fg.gemm)(*mutate(*_operands()))


def test_gemm_out_dtype_error():
    with pytest.raises(TypeError, match="gemm: out_dtype must be one of bfloat16, float32, got float16"):
        fg.gemm(*_operands(), out_dtype=jnp.float16)


def test_grouped_errors():
    a, a_s, b, b_s = _operands(g=4)
    with pytest.raises(ValueError, match=r"grouped_gemm: group_sizes must have shape \(4,\)"):
        fg.grouped_gemm(a, a_s, b, b_s, jnp.zeros((3,), jnp.int32))
    with pytest.raises(TypeError, match="grouped_gemm: group_sizes must have dtype int32"):
        fg.grouped_gemm(a, a_s, b, b_s, jnp.zeros((4,), jnp.float32))
    with pytest.raises(ValueError, match=r"grouped_gemm: b must be \[G, N, K\]"):
        fg.grouped_gemm(a, a_s, b[0], b_s[0], jnp.zeros((4,), jnp.int32))
    am = jnp.zeros((3, 16, 256), jnp.float8_e4m3fn)
    am_s = jnp.ones((3, 16, 2), jnp.float32)
    with pytest.raises(ValueError, match=r"grouped_gemm_masked: G \(first axis\) of a \(3\) and b \(4\) must match"):
        fg.grouped_gemm_masked(am, am_s, b, b_s, jnp.zeros((3,), jnp.int32))
    with pytest.raises(ValueError, match=r"grouped_gemm_masked: a must be \[G, Mmax, K\]"):
        fg.grouped_gemm_masked(a, a_s, b, b_s, jnp.zeros((4,), jnp.int32))
    with pytest.raises(ValueError, match=r"grouped_gemm_masked: masked_m must have shape \(4,\)"):
        fg.grouped_gemm_masked(am[:1].repeat(4, 0), am_s[:1].repeat(4, 0), b, b_s,
                               jnp.zeros((2,), jnp.int32))
