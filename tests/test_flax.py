"""Flax layers: FP8 Linear / Dense / MoE against their bf16 / f32 counterparts, and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import calc_diff, randn

nnx = pytest.importorskip("flax.nnx")
import flax.linen as nn  # noqa: E402

from jax_fp8gemm import flax as fgf  # noqa: E402


def test_nnx_linear_matches_float_linear(rng):
    layer = fgf.Linear(256, 192, rngs=nnx.Rngs(0))
    plain = nnx.Linear(256, 192, rngs=nnx.Rngs(0))
    x = randn(rng, (8, 20, 256))
    assert calc_diff(layer(x), plain(x)) <= 2e-3
    g = nnx.grad(lambda m: jnp.mean(m(x) ** 2))(layer)
    g_ref = nnx.grad(lambda m: jnp.mean(m(x) ** 2))(plain)
    assert calc_diff(g.kernel[...], g_ref.kernel[...]) <= 2e-3
    assert calc_diff(g.bias[...], g_ref.bias[...]) <= 2e-3


def test_nnx_linear_bf16_quantizes_the_f32_kernel_directly(rng):
    """With a bf16 compute dtype the kernel reaches fg.dot_general in its f32 parameter dtype (no
    bf16 copy of the weight per step), the output is still bf16 and the gradient f32."""
    layer = fgf.Linear(256, 192, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    plain = nnx.Linear(256, 192, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    x = randn(rng, (4, 16, 256), jnp.bfloat16)
    y = layer(x)
    assert y.dtype == jnp.bfloat16
    assert calc_diff(y, plain(x)) <= 2e-3
    seen = []  # the dtype of the kernel fg.dot_general receives
    real_dot = layer.dot_general
    layer.dot_general = lambda a, b, *args, **kw: seen.append(b.dtype) or real_dot(a, b, *args, **kw)
    layer(x)
    assert seen == [jnp.float32]
    g = nnx.grad(lambda m: jnp.mean(m(x).astype(jnp.float32) ** 2))(layer)
    assert g.kernel[...].dtype == jnp.float32
    g_ref = nnx.grad(lambda m: jnp.mean(m(x).astype(jnp.float32) ** 2))(plain)
    assert calc_diff(g.kernel[...], g_ref.kernel[...]) <= 2e-3


def test_linen_dense(rng):
    x = randn(rng, (16, 128))
    params = fgf.Dense(64).init(jax.random.key(0), x)
    y = fgf.Dense(64).apply(params, x)
    y_ref = nn.Dense(64).apply(params, x)
    assert calc_diff(y, y_ref) <= 2e-3


def test_moe_fp8_matches_bf16_switch(rng):
    kwargs = dict(d_model=128, d_ff=256, num_experts=4, top_k=2)
    fp8 = fgf.MoE(**kwargs, use_fp8=True, rngs=nnx.Rngs(1))
    bf16 = fgf.MoE(**kwargs, use_fp8=False, rngs=nnx.Rngs(1))
    x = randn(rng, (2, 24, 128), jnp.bfloat16)
    y8, yb = fp8(x), bf16(x)
    assert y8.shape == x.shape
    assert calc_diff(y8, yb) <= 5e-3
    g8 = nnx.grad(lambda m: jnp.mean(m(x).astype(jnp.float32) ** 2))(fp8)
    gb = nnx.grad(lambda m: jnp.mean(m(x).astype(jnp.float32) ** 2))(bf16)
    for name in ("w_gate", "w_up", "w_down"):
        assert calc_diff(getattr(g8, name)[...], getattr(gb, name)[...]) <= 5e-3, name
    assert np.all(np.isfinite(np.asarray(g8.router.kernel[...])))
