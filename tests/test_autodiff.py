"""FP8 training ops: forward and gradients against float64 references of the same quantized math
and against bf16 autodiff of the unquantized op; the dot_general / ragged_dot drop-ins."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import calc_diff, deq_blocks, deq_rows, f64, randn

import jax_fp8gemm as fg


@pytest.mark.parametrize("m,k,n", [(256, 384, 256), (130, 200, 72), (100, 201, 130)])
def test_fp8_dot_forward_and_grads(rng, m, k, n):
    x = randn(rng, (m, k), jnp.bfloat16)
    w = randn(rng, (k, n), jnp.bfloat16, scale=0.05)
    dy = randn(rng, (m, n), jnp.bfloat16)
    y, vjp = jax.vjp(fg.fp8_dot, x, w)
    dx, dw = vjp(dy)
    assert y.shape == (m, n) and y.dtype == jnp.bfloat16
    assert dx.shape == x.shape and dx.dtype == x.dtype and dw.shape == w.shape
    # Same quantized math in float64 (padding to multiples of 16 changes nothing).
    pad = lambda v, axis: np.pad(v, [(0, -v.shape[a] % 16 if a == axis % v.ndim else 0) for a in range(v.ndim)])
    xp, wp = f64(x), f64(w)
    y_ref = deq_rows(pad(xp, 1)) @ deq_blocks(pad(wp.T, 1)).T
    assert calc_diff(y, y_ref) <= 1e-5
    dyp = f64(dy)
    dx_ref = (deq_rows(pad(dyp, 1)) @ deq_blocks(pad(wp, 1)).T)[:, :k]
    dw_ref = (deq_rows(pad(xp.T, 1)) @ deq_rows(pad(dyp.T, 1)).T)
    assert calc_diff(dx, dx_ref) <= 1e-5
    assert calc_diff(dw, dw_ref) <= 1e-5
    # Against bf16 autodiff of the unquantized op.
    y_bf, vjp_bf = jax.vjp(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32), x, w)
    dx_bf, dw_bf = vjp_bf(dy.astype(jnp.float32))
    assert calc_diff(y, y_bf) <= 2e-3
    assert calc_diff(dx, dx_bf) <= 2e-3
    assert calc_diff(dw, dw_bf) <= 2e-3


def test_fp8_dot_jit_grad_leading_axes_vmap_remat(rng):
    x = randn(rng, (2, 64, 128), jnp.float32)
    w = randn(rng, (128, 48), jnp.float32, scale=0.1)
    loss = lambda x, w: jnp.sum(fg.fp8_dot(x, w) ** 2)
    gx, gw = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)
    gx_r, gw_r = jax.jit(jax.grad(jax.checkpoint(loss), argnums=(0, 1)))(x, w)
    np.testing.assert_array_equal(np.asarray(gx), np.asarray(gx_r))
    np.testing.assert_array_equal(np.asarray(gw), np.asarray(gw_r))
    ref_gx, ref_gw = jax.grad(lambda x, w: jnp.sum((x @ w) ** 2), argnums=(0, 1))(x, w)
    assert calc_diff(gx, ref_gx) <= 2e-3 and calc_diff(gw, ref_gw) <= 2e-3
    yv = jax.vmap(fg.fp8_dot, in_axes=(0, None))(x, w)
    np.testing.assert_array_equal(np.asarray(yv), np.asarray(fg.fp8_dot(x, w)))

    def step(carry, xi):
        return carry + jnp.sum(fg.fp8_dot(xi, w)), None
    total, _ = jax.lax.scan(step, 0.0, x)
    assert np.isfinite(float(total))


def test_backward_keeps_only_fp8_copies(rng):
    """The residuals of fp8_dot / ragged_dot are the FP8 operands the backward pass needs (x^T in
    1x128 groups along tokens, w's blocks in the dgrad orientation) and their scales: no bf16 copy
    of an input stays alive between forward and backward."""
    x = randn(rng, (256, 384), jnp.bfloat16)
    w = randn(rng, (384, 512), jnp.bfloat16)
    _, vjp = jax.vjp(fg.fp8_dot, x, w)
    leaves = jax.tree.leaves(vjp)
    assert sorted((l.shape, str(l.dtype)) for l in leaves) == sorted(
        [((384, 256), "float8_e4m3fn"), ((384, 2), "float32"),
         ((384, 512), "float8_e4m3fn"), ((3, 4), "float32")])
    rhs = randn(rng, (4, 384, 256), jnp.bfloat16)
    sizes = jnp.asarray([100, 0, 60, 96], jnp.int32)
    _, vjp = jax.vjp(lambda a, b: fg.ragged_dot(a, b, sizes), x, rhs)
    big = [l for l in jax.tree.leaves(vjp) if l.size >= 256 * 128]
    assert big and all(l.dtype == jnp.float8_e4m3fn for l in big), [(l.shape, l.dtype) for l in big]


def test_dot_general_drop_in(rng):
    x = randn(rng, (4, 32, 256), jnp.bfloat16)
    w = randn(rng, (256, 128), jnp.bfloat16, scale=0.05)
    dn = (((2,), (0,)), ((), ()))
    out = fg.dot_general(x, w, dn)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(fg.fp8_dot(x, w)))
    # [N, K] weights (contracting rhs axis 1) are the same op.
    out_t = fg.dot_general(x, w.T, (((2,), (1,)), ((), ())))
    np.testing.assert_array_equal(np.asarray(out_t), np.asarray(out))
    assert fg.dot_general(x, w, dn, preferred_element_type=jnp.float32).dtype == jnp.float32
    # Patterns it does not accelerate are jax.lax.dot_general exactly.
    xb, wb = randn(rng, (3, 8, 16)), randn(rng, (3, 16, 4))
    bdn = (((2,), (1,)), ((0,), (0,)))
    np.testing.assert_array_equal(np.asarray(fg.dot_general(xb, wb, bdn)),
                                  np.asarray(jax.lax.dot_general(xb, wb, bdn)))
    xi = jnp.arange(12, dtype=jnp.int32).reshape(3, 4)
    np.testing.assert_array_equal(np.asarray(fg.dot_general(xi, xi.T, (((1,), (0,)), ((), ())))),
                                  np.asarray(xi @ xi.T))


@pytest.mark.parametrize("lhs_shape,rhs_shape,dn", [
    ((2, 5, 3, 64), (3, 64, 4, 24), (((2, 3), (0, 1)), ((), ()))),   # rhs [K..., N...]
    ((2, 5, 3, 64), (3, 64, 4, 24), (((3, 2), (1, 0)), ((), ()))),   # the same pairs listed the other way
    ((10, 3, 64), (4, 24, 3, 64), (((1, 2), (2, 3)), ((), ()))),      # rhs [N..., K...]
    ((3, 64), (3, 64, 40), (((0, 1), (0, 1)), ((), ()))),             # lhs with no free axis: one row
])
def test_dot_general_multi_axis_contractions(rng, lhs_shape, rhs_shape, dn):
    """Contractions that are x @ w after free reshapes (nnx.LinearGeneral, nnx.Einsum) run as
    fp8_dot on the reshaped operands, values and gradients: bitwise that, and near the f32 op."""
    (lc, rc), _ = dn
    lhs, rhs = randn(rng, lhs_shape, jnp.float32), randn(rng, rhs_shape, jnp.float32, scale=0.1)
    n_c = len(lc)
    k = int(np.prod(lhs_shape[len(lhs_shape) - n_c:]))
    rhs_leading = min(rc) == 0  # the cases' rhs blocks are leading or trailing, in lhs's order
    as_w = (lambda r: r.reshape(k, -1)) if rhs_leading else (lambda r: r.reshape(-1, k).T)

    def via_fp8_dot(l, r):
        return fg.fp8_dot(l.reshape(*lhs_shape[:len(lhs_shape) - n_c], k), as_w(r))

    loss = lambda f: lambda l, r: jnp.sum(f(l, r).reshape(-1) ** 2)
    out = fg.dot_general(lhs, rhs, dn)
    want_out = via_fp8_dot(lhs, rhs).reshape(out.shape)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want_out))
    ref = jax.lax.dot_general(lhs, rhs, dn)
    assert out.shape == ref.shape and calc_diff(out, ref) <= 2e-3
    grads = jax.grad(loss(lambda l, r: fg.dot_general(l, r, dn)), argnums=(0, 1))(lhs, rhs)
    want = jax.grad(loss(via_fp8_dot), argnums=(0, 1))(lhs, rhs)
    for g, w in zip(grads, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    ref_grads = jax.grad(loss(lambda l, r: jax.lax.dot_general(l, r, dn)), argnums=(0, 1))(lhs, rhs)
    assert all(calc_diff(g, r) <= 2e-3 for g, r in zip(grads, ref_grads))


def test_dot_general_other_multi_axis_contractions_are_lax(rng):
    """Contracted axes that are not lhs's trailing ones, or not a contiguous block of rhs's in the
    same order, are jax.lax.dot_general exactly."""
    cases = [((5, 3, 64), (3, 7, 64), (((1, 2), (0, 2)), ((), ()))),   # rhs's axes 0 and 2: not a block
             ((3, 64, 5), (3, 64, 7), (((0, 1), (0, 1)), ((), ())))]   # lhs's leading axes
    for lhs_shape, rhs_shape, dn in cases:
        lhs, rhs = randn(rng, lhs_shape), randn(rng, rhs_shape)
        np.testing.assert_array_equal(np.asarray(fg.dot_general(lhs, rhs, dn)),
                                      np.asarray(jax.lax.dot_general(lhs, rhs, dn)))
    # Pairs in opposite orders: lhs (H, D) against rhs (D, H).
    l2, r2 = randn(rng, (5, 3, 64)), randn(rng, (64, 3, 8))
    dn = (((1, 2), (1, 0)), ((), ()))
    np.testing.assert_array_equal(np.asarray(fg.dot_general(l2, r2, dn)),
                                  np.asarray(jax.lax.dot_general(l2, r2, dn)))


def test_einsum_drop_in(rng):
    """fg.einsum: a projection written as an einsum runs as fp8_dot; contractions with batch axes
    (attention scores) are jnp.einsum exactly."""
    x, w = randn(rng, (2, 10, 64)), randn(rng, (64, 4, 24), scale=0.1)
    got = fg.einsum("btd,dnh->btnh", x, w)
    np.testing.assert_array_equal(np.asarray(got),
                                  np.asarray(fg.fp8_dot(x, w.reshape(64, 96)).reshape(2, 10, 4, 24)))
    assert calc_diff(got, jnp.einsum("btd,dnh->btnh", x, w)) <= 2e-3
    q, kk = randn(rng, (2, 10, 4, 24)), randn(rng, (2, 12, 4, 24))
    np.testing.assert_array_equal(np.asarray(fg.einsum("bthd,bshd->bhts", q, kk)),
                                  np.asarray(jnp.einsum("bthd,bshd->bhts", q, kk)))


def test_flax_nnx_linear_general_and_einsum(rng):
    nnx = pytest.importorskip("flax.nnx")
    x = randn(rng, (2, 16, 3, 64))
    general = nnx.LinearGeneral((3, 64), (4, 32), axis=(-2, -1), dot_general=fg.dot_general,
                                rngs=nnx.Rngs(0))
    kernel = general.kernel[...]
    want = fg.fp8_dot(x.reshape(2, 16, 192), kernel.reshape(192, 128)).reshape(2, 16, 4, 32)
    np.testing.assert_array_equal(np.asarray(general(x)), np.asarray(want + general.bias[...]))
    einsum = nnx.Einsum("btd,dnh->btnh", (64, 4, 32), (4, 32), einsum_op=fg.einsum, rngs=nnx.Rngs(1))
    xe = x[:, :, 0]
    ref = jnp.einsum("btd,dnh->btnh", xe, einsum.kernel[...]) + einsum.bias[...]
    assert calc_diff(einsum(xe), ref) <= 2e-3
    grads = nnx.grad(lambda m: jnp.sum(m(xe) ** 2))(einsum)
    assert np.all(np.isfinite(np.asarray(grads.kernel[...])))


def test_flax_nnx_linear_accepts_dot_general(rng):
    nnx = pytest.importorskip("flax.nnx")
    layer = nnx.Linear(256, 128, dot_general=fg.dot_general, rngs=nnx.Rngs(0))
    x = randn(rng, (16, 256))
    y = layer(x)
    ref = x @ layer.kernel[...] + layer.bias[...]
    assert calc_diff(y, ref) <= 2e-3
    grads = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(layer)
    assert np.all(np.isfinite(np.asarray(grads.kernel[...])))


def numpy_ragged(lhs, rhs, sizes):
    out = np.zeros((lhs.shape[0], rhs.shape[2]))
    start = 0
    for g, s in enumerate(sizes):
        out[start:start + s] = lhs[start:start + s] @ rhs[g]
        start += s
    return out


@pytest.mark.parametrize("m,k,n", [(200, 256, 144), (203, 200, 130)])  # the second: widths off 32 / 8
def test_ragged_dot_forward_and_grads(rng, m, k, n):
    g = 4
    sizes = np.array([70, 0, 50, 60])  # sum 180 < 200: the last 20 rows are zero
    lhs = randn(rng, (m, k), jnp.bfloat16)
    rhs = randn(rng, (g, k, n), jnp.bfloat16, scale=0.05)
    gs = jnp.asarray(sizes, jnp.int32)
    y, vjp = jax.vjp(lambda a, b: fg.ragged_dot(a, b, gs), lhs, rhs)
    dy = randn(rng, (m, n), jnp.bfloat16)
    dl, dr = vjp(dy)
    y_ref = numpy_ragged(f64(lhs), f64(rhs), sizes)
    assert calc_diff(y, y_ref) <= 2e-3
    assert y.shape == (m, n) and dl.shape == lhs.shape and dr.shape == rhs.shape
    assert np.all(np.asarray(y)[180:] == 0)
    y_bf, vjp_bf = jax.vjp(lambda a, b: jax.lax.ragged_dot(a, b, gs, preferred_element_type=jnp.float32), lhs, rhs)
    dl_bf, dr_bf = vjp_bf(dy.astype(jnp.float32))
    assert calc_diff(dl, dl_bf) <= 2e-3
    assert calc_diff(dr, dr_bf) <= 2e-3
    # Same quantized math in float64 for the weight gradient.
    ql = deq_rows(f64(lhs).T)
    qd = deq_rows(f64(dy).T)
    start = 0
    for gi, s in enumerate(sizes):
        ref = ql[:, start:start + s] @ qd[:, start:start + s].T
        if s:
            assert calc_diff(dr[gi], ref) <= 1e-5
        else:
            assert np.all(np.asarray(dr[gi]) == 0)
        start += s
    # Fallback: a 3-D lhs is jax.lax.ragged_dot's business... and must equal it.
    assert fg.ragged_dot(lhs, rhs, gs, preferred_element_type=jnp.float32).dtype == jnp.float32


def test_wgrad_errors():
    a = jnp.zeros((16, 256), jnp.float8_e4m3fn)
    s = jnp.ones((16, 2), jnp.float32)
    with pytest.raises(ValueError, match=r"gemm_wgrad: T \(token axis, last\) of a \(256\) and b \(128\)"):
        fg.gemm_wgrad(a, s, a[:, :128], s[:, :1])
    with pytest.raises(ValueError, match=r"grouped_gemm_wgrad: group_sizes must be \[G\]"):
        fg.grouped_gemm_wgrad(a, s, a, s, jnp.zeros((2, 2), jnp.int32))
    with pytest.raises(ValueError, match=r"fp8_dot: K \(last axis\) of x"):
        fg.fp8_dot(jnp.zeros((4, 8)), jnp.zeros((9, 3)))
