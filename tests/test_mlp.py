"""fg.fp8_mlp (act(x @ w_up) @ w_down with the activation fused into the quantizations) and the
Flax MLP layer: forward and gradients against float64 of the same quantized math and against f32
autodiff of the unquantized block; the fused activation quantizers against the reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import calc_diff, deq_blocks, deq_rows, gpu, randn
from flax import nnx

import jax_fp8gemm as fg
from jax_fp8gemm import flax as fgf
from jax_fp8gemm import reference as R


def mlp_reference64(x, w_up, w_down, dy):
    """The same quantized math in float64, (y, dx, dw_up, dw_down), given the two bf16
    intermediates the kernels store, u = x @ w_up and dh = dy @ w_down.T, from fg.fp8_dot (the
    same GEMMs on the same FP8 operands, tested against float64 in test_autodiff): a value of u
    that a float64 product would round to the neighbouring bf16 value changes act(u)'s 1x128 scale
    and so the whole group downstream, more than the 1e-5 this compares at."""
    u = fg.fp8_dot(x, w_up)
    dh = jax.vjp(lambda h: fg.fp8_dot(h, w_down), u)[1](dy)[0]
    h = R.activate(u, "gelu")
    y = deq_rows(h) @ deq_blocks(w_down.T).T
    du = R.activation_grad(dh, u, "gelu")
    dx = deq_rows(du) @ deq_blocks(w_up).T
    dw_up = deq_rows(x.T) @ deq_rows(du.T).T
    dw_down = deq_rows(h.T) @ deq_rows(dy.T).T
    return y, dx, dw_up, dw_down


def test_reference_gelu_and_derivative_in_float32(rng):
    """The oracle's gelu and gelu' (the sigmoid form with folded constants that the kernels also
    evaluate) against float64 of jax.nn.gelu's tanh form, written as u * sigmoid(2z) so that
    float64 itself has no cancellation in the tail, and against jax.nn.gelu and its autodiff
    derivative in float32 where the tanh form does not cancel much (u > -2)."""
    u32 = np.concatenate([np.linspace(-12, 12, 100_001), 4 * rng.standard_normal(100_000)]).astype(np.float32)
    u = u32.astype(np.float64)
    z = np.sqrt(2 / np.pi) * (u + 0.044715 * u ** 3)
    s = 1 / (1 + np.exp(-2 * z))
    gelu64 = u * s
    grad64 = s + u * 2 * np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * u ** 2) * s * (1 - s)
    act, act_grad = R.ACTIVATIONS["gelu"]
    got = np.asarray(act(jnp.asarray(u32)), np.float64)
    got_grad = np.asarray(act_grad(jnp.asarray(u32)), np.float64)
    # A few ulp in the body; in the tail the exponent's float32 rounding is amplified by its size
    # (|2z| ~ 100 at u = -12: ~1e-5 relative, as with the unfolded formula and XLA's exp). Once
    # the sigmoid leaves float32's normal range, XLA flushes it to zero.
    body, normal = u32 >= -4, s > 1e-37
    np.testing.assert_allclose(got[body], gelu64[body], rtol=3e-6, atol=1e-30)
    np.testing.assert_allclose(got[normal], gelu64[normal], rtol=2e-5)
    assert np.all(np.abs(got[~normal]) <= 1e-35)
    np.testing.assert_allclose(got_grad, grad64, rtol=2e-6, atol=2e-6)
    no_cancel = u32 > -2
    want = jax.nn.gelu(u32[no_cancel], approximate=True)
    np.testing.assert_allclose(got[no_cancel], np.asarray(want), rtol=1e-5, atol=1e-7)
    want_grad = jax.vmap(jax.grad(lambda v: jax.nn.gelu(v, approximate=True)))(u32[no_cancel])
    np.testing.assert_allclose(got_grad[no_cancel], np.asarray(want_grad), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("t,d,f,o", [(256, 384, 512, 256), (200, 136, 520, 72), (203, 130, 130, 70)])
def test_fp8_mlp_forward_and_grads(rng, t, d, f, o):
    x = randn(rng, (t, d), jnp.bfloat16)
    w_up = randn(rng, (d, f), jnp.float32, scale=d ** -0.5)
    w_down = randn(rng, (f, o), jnp.float32, scale=f ** -0.5)
    dy = randn(rng, (t, o), jnp.bfloat16)
    y, vjp = jax.vjp(jax.jit(fg.fp8_mlp), x, w_up, w_down)
    grads = vjp(dy)
    assert y.dtype == jnp.bfloat16 and y.shape == (t, o)
    assert [g.dtype for g in grads] == [jnp.bfloat16, jnp.float32, jnp.float32]
    for got, want in zip((y, *grads), mlp_reference64(x, w_up, w_down, dy)):
        assert calc_diff(got, want) <= 1e-5
    # Against f32 autodiff of the unquantized block: two FP8 GEMMs in a row, each way.
    block = lambda x, a, b: jax.nn.gelu(x.astype(jnp.float32) @ a) @ b
    y32, vjp32 = jax.vjp(block, x, w_up, w_down)
    assert calc_diff(y, y32) <= 2e-3
    for got, want in zip(grads, vjp32(dy.astype(jnp.float32))):
        assert calc_diff(got, want) <= 2e-3


def test_fp8_mlp_leading_axes_vmap_and_errors(rng):
    x = randn(rng, (2, 3, 50, 128), jnp.bfloat16)
    w_up, w_down = randn(rng, (128, 256), scale=0.09), randn(rng, (256, 128), scale=0.06)
    y = fg.fp8_mlp(x, w_up, w_down)
    assert y.shape == (2, 3, 50, 128)
    flat = fg.fp8_mlp(x.reshape(-1, 128), w_up, w_down).reshape(y.shape)
    np.testing.assert_array_equal(np.asarray(y, np.float32), np.asarray(flat, np.float32))
    per = jax.vmap(lambda xi: fg.fp8_mlp(xi, w_up, w_down))(x.reshape(6, 50, 128))
    np.testing.assert_array_equal(np.asarray(per.reshape(y.shape), np.float32), np.asarray(y, np.float32))
    with pytest.raises(ValueError, match="activation must be one of"):
        fg.fp8_mlp(x, w_up, w_down, activation="relu6")
    with pytest.raises(ValueError, match=r"w_down must be \[F, O\]"):
        fg.fp8_mlp(x, w_up, w_down.T[:100])


def test_flax_mlp_layer(rng):
    fp8 = fgf.MLP(128, 512, rngs=nnx.Rngs(0))
    ref = fgf.MLP(128, 512, use_fp8=False, rngs=nnx.Rngs(0))
    assert fp8.up[...].shape == (128, 512) and fp8.down[...].shape == (512, 128)
    x = randn(rng, (64, 128), jnp.bfloat16)
    # use_fp8=False is what two bf16 nnx.Linear layers around jax.nn.gelu compute.
    up = nnx.Linear(128, 512, use_bias=False, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    down = nnx.Linear(512, 128, use_bias=False, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    up.kernel[...], down.kernel[...] = ref.up[...], ref.down[...]
    np.testing.assert_array_equal(np.asarray(ref(x), np.float32),
                                  np.asarray(down(jax.nn.gelu(up(x))), np.float32))
    assert calc_diff(fp8(x), ref(x)) <= 2e-3
    loss = lambda m: jnp.mean(m(x).astype(jnp.float32) ** 2)
    g8, gb = nnx.grad(loss)(fp8), nnx.grad(loss)(ref)
    assert calc_diff(g8.up[...], gb.up[...]) <= 5e-3
    assert calc_diff(g8.down[...], gb.down[...]) <= 5e-3


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("shape", [(256, 384), (200, 1000), (3, 130, 256), (2, 1000, 2056), (3, 1100, 1544)])
def test_fused_activation_quantizers_kernel(rng, dtype, shape):
    """The kernels' gelu / gelu-gradient against the reference run by XLA:CPU: the same float32
    formulas on both sides, but the kernels' fast exp and reciprocal (2 ulp) and XLA's exp differ
    in the last bits, which can move a value across a bf16 or e4m3 rounding boundary now and then
    (and a group of only tiny values, e.g. the 2 rows of a partial tile, across the underflow to
    zero). The kernels run persistent, one CTA per resident slot: (3, 1100, 1544) has 351 tiles,
    more than the H100's / H200's 264 or 132 CTAs, so CTAs step on across column, row and batch
    boundaries. float16 inputs run the same kernels' half-precision instances."""
    u = randn(rng, shape, dtype, scale=3.0)
    g = randn(rng, shape, dtype)
    cpu = jax.devices("cpu")[0]
    fwd = lambda u: fg.quantize_rowwise_transpose(u, activation="gelu")
    bwd = lambda g, u: fg.quantize_rowwise_transpose_act_grad(g, u, "gelu")
    for fn, args in ((fwd, (u,)), (bwd, (g, u))):
        got = jax.jit(fn)(*args)
        want = jax.jit(fn)(*[jax.device_put(a, cpu) for a in args])
        for (q, s), (wq, ws) in ((got[:2], want[:2]), (got[2:], want[2:])):
            assert np.mean(np.asarray(q).view(np.uint8) != np.asarray(wq).view(np.uint8)) < 1e-3
            np.testing.assert_allclose(np.asarray(s), np.asarray(ws), rtol=1e-2,
                                       atol=1e-6 * float(np.max(np.asarray(ws))))
            assert calc_diff(R.dequantize_rowwise(q, s), R.dequantize_rowwise(wq, ws)) <= 1e-6
