"""Quantization ops on the reference path (every backend): shapes, the scale rule, round-trip
bounds, special values, transforms and argument errors."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from conftest import randn

import jax_fp8gemm as fg

TINY = np.finfo(np.float32).tiny


def numpy_quantize_groups(g, pow2=False):
    """Independent oracle: g [..., 128] float32 groups -> (q as uint8 bits, s)."""
    amax = np.max(np.abs(g), axis=-1)
    s = (amax * (np.float32(1) / np.float32(448))).astype(np.float32)
    s = np.where(s < TINY, TINY, s).astype(np.float32)
    if pow2:
        s = np.where(np.isfinite(s), np.exp2(np.ceil(np.log2(s))), s).astype(np.float32)
    q = np.clip(g * (np.float32(1) / s)[..., None], -448, 448).astype(ml_dtypes.float8_e4m3fn)
    return q.view(np.uint8), s


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("shape", [(3, 256), (2, 5, 300), (1, 40), (7, 1)])
@pytest.mark.parametrize("pow2", [False, True])
def test_rowwise_matches_numpy_oracle(rng, dtype, shape, pow2):
    x = randn(rng, shape, dtype, scale=3.0)
    q, s = fg.quantize_rowwise(x, pow2_scale=pow2)
    k = shape[-1]
    kb = -(-k // 128)
    assert q.shape == shape and q.dtype == jnp.float8_e4m3fn
    assert s.shape == (*shape[:-1], kb) and s.dtype == jnp.float32
    xf = np.asarray(x.astype(jnp.float32))
    g = np.pad(xf, [(0, 0)] * (xf.ndim - 1) + [(0, kb * 128 - k)]).reshape(*shape[:-1], kb, 128)
    q_ref, s_ref = numpy_quantize_groups(g, pow2)
    np.testing.assert_array_equal(np.asarray(s), s_ref)
    q_ref = q_ref.reshape(*shape[:-1], kb * 128)[..., :k]
    np.testing.assert_array_equal(np.asarray(q).view(np.uint8), q_ref)


@pytest.mark.parametrize("shape", [(256, 384), (3, 130, 200), (1, 17)])
@pytest.mark.parametrize("pow2", [False, True])
def test_blockwise_matches_numpy_oracle(rng, shape, pow2):
    w = randn(rng, shape, jnp.bfloat16, scale=0.02)
    q, s = fg.quantize_blockwise(w, pow2_scale=pow2)
    *lead, n, k = shape
    nb, kb = -(-n // 128), -(-k // 128)
    assert q.shape == tuple(shape) and s.shape == (*lead, nb, kb)
    wf = np.asarray(w.astype(jnp.float32))
    pad = [(0, 0)] * len(lead) + [(0, nb * 128 - n), (0, kb * 128 - k)]
    g = np.pad(wf, pad).reshape(*lead, nb, 128, kb, 128)
    g = np.moveaxis(g, -3, -2).reshape(*lead, nb, kb, 128 * 128)
    q_ref, s_ref = numpy_quantize_groups(g, pow2)
    np.testing.assert_array_equal(np.asarray(s), s_ref)
    q_ref = np.moveaxis(q_ref.reshape(*lead, nb, kb, 128, 128), -3, -2)
    q_ref = q_ref.reshape(*lead, nb * 128, kb * 128)[..., :n, :k]
    np.testing.assert_array_equal(np.asarray(q).view(np.uint8), q_ref)


@pytest.mark.parametrize("pow2", [False, True])
def test_round_trip_error_bound(rng, pow2):
    # e4m3 keeps 3 mantissa bits: relative rounding error <= 2^-4 for normals, and the smallest
    # subnormal step is 2^-9, so |x - deq| <= max(|x| 2^-4, s 2^-10) (plus f32 rounding).
    x = randn(rng, (64, 1024), jnp.float32, scale=10.0) * jnp.exp(randn(rng, (64, 1024)))
    q, s = fg.quantize_rowwise(x, pow2_scale=pow2)
    deq = np.asarray(fg.dequantize_rowwise(q, s), np.float64)
    xs = np.asarray(x, np.float64)
    step = np.repeat(np.asarray(s, np.float64), 128, axis=-1) * 2.0**-10
    bound = np.maximum(np.abs(xs) * 2.0**-4, step) * (1 + 1e-6)
    assert np.all(np.abs(xs - deq) <= bound)
    # The largest magnitude of each group lands on +-448 exactly (without pow2 rounding).
    if not pow2:
        qf = np.asarray(q.astype(jnp.float32)).reshape(64, 8, 128)
        assert np.all(np.max(np.abs(qf), axis=-1) == 448.0)
    else:
        assert np.all(np.log2(np.asarray(s)) == np.round(np.log2(np.asarray(s))))


def test_blockwise_round_trip(rng):
    w = randn(rng, (2, 300, 260), jnp.float32)
    q, s = fg.quantize_blockwise(w)
    deq = np.asarray(fg.dequantize_blockwise(q, s), np.float64)
    ws = np.asarray(w, np.float64)
    assert np.all(np.abs(ws - deq) <= np.abs(ws) * 2.0**-4 + np.max(np.abs(ws)) / 448 * 2.0**-10)


def test_zero_groups_get_finite_scale_and_zeros(rng):
    x = randn(rng, (4, 384), jnp.bfloat16)
    x = x.at[1].set(0).at[2, 128:256].set(0)
    q, s = fg.quantize_rowwise(x)
    s = np.asarray(s)
    assert np.all(np.isfinite(s)) and np.all(s > 0)
    assert s[1, 0] == TINY and s[2, 1] == TINY
    qf = np.asarray(q.astype(jnp.float32))
    assert np.all(qf[1] == 0) and np.all(qf[2, 128:256] == 0)
    wq, ws = fg.quantize_blockwise(jnp.zeros((130, 129), jnp.float32))
    assert np.all(np.asarray(ws) == TINY) and np.all(np.asarray(wq.astype(jnp.float32)) == 0)


def test_tiny_and_huge_magnitudes(rng):
    for scale in (1e-30, 1e30):
        x = randn(rng, (8, 256), jnp.float32, scale=scale)
        q, s = fg.quantize_rowwise(x)
        deq = np.asarray(fg.dequantize_rowwise(q, s), np.float64)
        rel = np.abs(deq - np.asarray(x, np.float64)) / np.max(np.abs(np.asarray(x)))
        assert np.all(np.isfinite(deq)) and rel.max() < 2.0**-4


def test_nan_and_inf_semantics(rng):
    x = np.array(randn(rng, (3, 256), jnp.float32))
    x[0, 5] = np.nan  # group (0, 0): NaN scale, NaN values
    x[1, 200] = np.inf  # group (1, 1): inf scale, the inf itself NaN, the rest 0
    q, s = fg.quantize_rowwise(jnp.asarray(x))
    s, qf = np.asarray(s), np.asarray(q.astype(jnp.float32))
    assert np.isnan(s[0, 0]) and np.all(np.isnan(qf[0, :128]))
    assert np.isinf(s[1, 1]) and np.isnan(qf[1, 200])
    finite = np.delete(qf[1, 128:256], 200 - 128)
    assert np.all(finite == 0)
    assert np.all(np.isfinite(s[2])) and np.all(np.isfinite(qf[2]))  # untouched rows unaffected
    assert np.isfinite(s[0, 1]) and np.all(np.isfinite(qf[0, 128:]))


def test_jit_and_vmap(rng):
    x = randn(rng, (4, 3, 256), jnp.bfloat16)
    q, s = jax.jit(fg.quantize_rowwise)(x)
    qv, sv = jax.vmap(fg.quantize_rowwise, in_axes=1, out_axes=1)(x)
    np.testing.assert_array_equal(np.asarray(q).view(np.uint8), np.asarray(qv).view(np.uint8))
    np.testing.assert_array_equal(np.asarray(s), np.asarray(sv))
    w = randn(rng, (5, 200, 256), jnp.float32)
    wq, ws = jax.jit(jax.vmap(fg.quantize_blockwise))(w)
    wq1, ws1 = fg.quantize_blockwise(w[3])
    np.testing.assert_array_equal(np.asarray(ws[3]), np.asarray(ws1))
    np.testing.assert_array_equal(np.asarray(wq[3]).view(np.uint8), np.asarray(wq1).view(np.uint8))
    deq = jax.vmap(fg.dequantize_blockwise, in_axes=(0, 0))(wq, ws)
    np.testing.assert_array_equal(np.asarray(deq[3]), np.asarray(fg.dequantize_blockwise(wq1, ws1)))
    deq_r = jax.vmap(fg.dequantize_rowwise, in_axes=(1, 1), out_axes=1)(q, s)
    np.testing.assert_array_equal(np.asarray(deq_r), np.asarray(fg.dequantize_rowwise(q, s)))


@pytest.mark.parametrize("blockwise", [False, True])
def test_quantize_transpose_is_both_orientations(rng, blockwise):
    """The fused op's transposed outputs quantize x^T (along the other axis), the straight ones x;
    under vmap each batch element is the op on that element."""
    x = randn(rng, (3, 200, 300), jnp.bfloat16)
    fused = fg.quantize_blockwise_transpose if blockwise else fg.quantize_rowwise_transpose
    single = fg.quantize_blockwise if blockwise else fg.quantize_rowwise
    q, s, qt, st = jax.jit(fused)(x)
    want = (*single(x), *single(jnp.swapaxes(x, 1, 2)))
    assert qt.shape == (3, 300, 200)
    for got, ref in zip((q, s, qt, st), want):
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(ref, np.float32))
    qv = jax.vmap(fused)(x)
    for got, ref in zip(qv, fused(x[1])):
        np.testing.assert_array_equal(np.asarray(got[1], np.float32), np.asarray(ref, np.float32))


def test_quantize_blockwise_transposed_is_quantize_blockwise_of_the_transpose(rng):
    """The transposed-only op (forward-only weights) gives exactly
    quantize_blockwise(w^T), batched too, and rejects bad input by its public name's op."""
    w = randn(rng, (2, 300, 200), jnp.bfloat16)
    qt, st = jax.jit(fg.quantize_blockwise_transposed)(w)
    want = fg.quantize_blockwise(jnp.swapaxes(w, 1, 2))
    assert qt.shape == (2, 200, 300) and st.shape == (2, 2, 3)
    for got, ref in zip((qt, st), want):
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(ref, np.float32))
    with pytest.raises(TypeError, match="quantize_blockwise_transpose.*x.*int8"):
        fg.quantize_blockwise_transposed(jnp.zeros((8, 8), jnp.int8))


# Each quantizer with align, as (op, its outputs from x padded explicitly): every FP8 output is the
# one of x zero-padded along that output's last axis (a transposed output: along x's rows).
def _pad(x, axis, align):
    extra = -x.shape[axis] % align
    return jnp.pad(x, [(0, extra if a == axis % x.ndim else 0) for a in range(x.ndim)])


ALIGNED_OPS = {
    "rowwise": (lambda x, a: fg.quantize_rowwise(x, align=a),
                lambda x, a: fg.quantize_rowwise(_pad(x, -1, a))),
    "blockwise": (lambda x, a: fg.quantize_blockwise(x, align=a),
                  lambda x, a: fg.quantize_blockwise(_pad(x, -1, a))),
    "rowwise transpose": (lambda x, a: fg.quantize_rowwise_transpose(x, align=a),
                          lambda x, a: (*fg.quantize_rowwise(_pad(x, -1, a)),
                                        *fg.quantize_rowwise(_pad(jnp.swapaxes(x, -1, -2), -1, a)))),
    "gelu transpose": (lambda x, a: fg.quantize_rowwise_transpose(x, activation="gelu", align=a),
                       lambda x, a: fg.quantize_rowwise_transpose(_pad(_pad(x, -1, a), -2, a),
                                                                  activation="gelu")),
    "blockwise transpose": (lambda x, a: fg.quantize_blockwise_transpose(x, align=a),
                            lambda x, a: (*fg.quantize_blockwise(_pad(x, -1, a)),
                                          *fg.quantize_blockwise(_pad(jnp.swapaxes(x, -1, -2), -1, a)))),
    "blockwise transposed": (lambda x, a: fg.quantize_blockwise_transposed(x, align=a),
                             lambda x, a: fg.quantize_blockwise(_pad(jnp.swapaxes(x, -1, -2), -1, a))),
    "gelu grad transpose": (lambda x, a: fg.quantize_rowwise_transpose_act_grad(x, jnp.flip(x, -1), "gelu",
                                                                                align=a),
                            lambda x, a: fg.quantize_rowwise_transpose_act_grad(
                                *(_pad(_pad(v, -1, a), -2, a) for v in (x, jnp.flip(x, -1))), "gelu")),
}


@pytest.mark.parametrize("op", sorted(ALIGNED_OPS))
@pytest.mark.parametrize("shape,align", [((40, 200), 32), ((2, 33, 70), 16), ((130, 24), 128),
                                         ((64, 256), 32), ((5, 4), 2)])
def test_align_pads_the_fp8_outputs_with_zeros(rng, op, shape, align):
    """q (and qt) of x with align are those of x zero-padded to a multiple of align along each
    output's last axis, the padding itself zeros; the scales are x's own (the padding stays inside
    the last group). (The gelu ops' references pad x on both axes; their extra rows are cut off.)"""
    x = randn(rng, shape, jnp.bfloat16)
    fn, padded_fn = ALIGNED_OPS[op]
    got, want = jax.jit(fn, static_argnums=1)(x, align), padded_fn(x, align)
    for g, w in zip(got, want):
        w = w[tuple(slice(0, n) for n in g.shape)] if op.startswith("gelu") else w
        assert g.shape == w.shape and g.shape[-1] % (align if g.dtype == jnp.float8_e4m3fn else 1) == 0
        np.testing.assert_array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32))
    plain = jax.jit(fn, static_argnums=1)(x, 1)
    for g, p in zip(got, plain):
        if g.dtype == jnp.float8_e4m3fn:
            np.testing.assert_array_equal(np.asarray(g[..., : p.shape[-1]], np.float32), np.asarray(p, np.float32))
            assert not np.asarray(g[..., p.shape[-1]:], np.float32).any()
        else:
            np.testing.assert_array_equal(np.asarray(g), np.asarray(p))


@pytest.mark.parametrize("align", [0, 3, 256, 16.0, None])
def test_align_must_be_a_power_of_two_up_to_128(align):
    with pytest.raises(ValueError, match="quantize_rowwise_transpose: align must be a power of two"):
        fg.quantize_rowwise_transpose(jnp.ones((4, 8), jnp.bfloat16), align=align)


@pytest.mark.parametrize("fn,arg,exc,words", [
    (fg.quantize_rowwise, jnp.zeros((4, 128), jnp.int32), TypeError, ["quantize_rowwise", "x", "int32"]),
    (fg.quantize_rowwise, jnp.float32(1.0), ValueError, ["quantize_rowwise", "x", "rank"]),
    (fg.quantize_blockwise, jnp.zeros((128,), jnp.float32), ValueError, ["quantize_blockwise", "w", "[..., N, K]"]),
    (fg.quantize_blockwise, jnp.zeros((128, 128), jnp.float8_e4m3fn), TypeError, ["w", "float8_e4m3fn"]),
    (fg.quantize_rowwise_transpose, jnp.zeros((128,), jnp.bfloat16), ValueError,
     ["quantize_rowwise_transpose", "x", "[..., R, C]"]),
    (fg.quantize_blockwise_transpose, jnp.zeros((8, 8), jnp.int8), TypeError,
     ["quantize_blockwise_transpose", "x", "int8"]),
])
def test_quantize_errors(fn, arg, exc, words):
    with pytest.raises(exc) as info:
        jax.jit(fn)(arg)
    for w in words:
        assert w in str(info.value)


def test_dequantize_errors():
    q = jnp.zeros((4, 256), jnp.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"dequantize_rowwise: s must have shape \(4, 2\)"):
        fg.dequantize_rowwise(q, jnp.ones((4, 3), jnp.float32))
    with pytest.raises(TypeError, match="dequantize_rowwise: q must have dtype float8_e4m3fn"):
        fg.dequantize_rowwise(q.astype(jnp.float32), jnp.ones((4, 2), jnp.float32))
    with pytest.raises(ValueError, match=r"dequantize_blockwise: s must have shape \(1, 2\)"):
        fg.dequantize_blockwise(q, jnp.ones((4, 2), jnp.float32))


def test_blockwise_nan_poisons_its_block(rng):
    w = np.array(randn(rng, (256, 256), jnp.float32))
    w[5, 3] = np.nan  # block (0, 0)
    q, s = fg.quantize_blockwise(jnp.asarray(w))
    s, qf = np.asarray(s), np.asarray(q.astype(jnp.float32))
    assert np.isnan(s[0, 0]) and np.all(np.isnan(qf[:128, :128]))
    assert np.all(np.isfinite(s.ravel()[1:])) and np.all(np.isfinite(qf[128:]))
