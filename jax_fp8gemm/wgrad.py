"""Weight-gradient GEMMs: both operands quantized 1x128 along the token axis (the contracted one),
FP32 output. `gemm_wgrad` for dense layers, `grouped_gemm_wgrad` (k-grouped: one contraction per
group of consecutive tokens) for ragged_dot's weight gradient. They run on the jnp reference until
the wgrad kernels land.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from . import _checks, _primitive, reference


def _operands(op, a, a_s, b, b_s):
    _checks.fp8(op, "a", a)
    _checks.fp8(op, "b", b)
    _checks.rank(op, "a", a, 2, "[M, T]")
    _checks.rank(op, "b", b, 2, "[N, T]")
    _checks.same(op, "T (token axis, last)", "a", a.shape[1], "b", b.shape[1])
    _checks.k_multiple_of_16(op, a.shape[1])
    _checks.scales(op, "a_s", a_s, _checks.rowwise_scale_shape(a.shape))
    _checks.scales(op, "b_s", b_s, _checks.rowwise_scale_shape(b.shape))


def _dense_abstract(a, a_s, b, b_s, *, out_dtype):
    _operands("gemm_wgrad", a, a_s, b, b_s)
    return ShapedArray((a.shape[0], b.shape[0]), _checks.out_dtype("gemm_wgrad", out_dtype))


def _grouped_abstract(a, a_s, b, b_s, group_sizes, *, out_dtype):
    op = "grouped_gemm_wgrad"
    _operands(op, a, a_s, b, b_s)
    _checks.dtype_in(op, "group_sizes", group_sizes, (jnp.int32,))
    _checks.rank(op, "group_sizes", group_sizes, 1, "[G]")
    return ShapedArray((group_sizes.shape[0], a.shape[0], b.shape[0]),
                       _checks.out_dtype(op, out_dtype))


gemm_wgrad_p = _primitive.define(
    "gemm_wgrad", abstract_eval=_dense_abstract,
    reference=lambda a, a_s, b, b_s, *, out_dtype: reference.gemm_wgrad(a, a_s, b, b_s, out_dtype),
    batching_rule=_primitive.batch_by_loop)

grouped_gemm_wgrad_p = _primitive.define(
    "grouped_gemm_wgrad", abstract_eval=_grouped_abstract,
    reference=lambda a, a_s, b, b_s, gs, *, out_dtype: reference.grouped_gemm_wgrad(
        a, a_s, b, b_s, gs, out_dtype),
    batching_rule=_primitive.batch_by_loop)


def gemm_wgrad(a: jax.Array, a_s: jax.Array, b: jax.Array, b_s: jax.Array, *,
               out_dtype=jnp.float32) -> jax.Array:
    """a [M, T] e4m3, b [N, T] e4m3, both with 1x128 scales along T -> [M, N] = a @ b.T (FP32)."""
    return gemm_wgrad_p.bind(a, a_s, b, b_s, out_dtype=np.dtype(out_dtype))


def grouped_gemm_wgrad(a: jax.Array, a_s: jax.Array, b: jax.Array, b_s: jax.Array,
                       group_sizes: jax.Array, *, out_dtype=jnp.float32) -> jax.Array:
    """k-grouped: out[g] = a[:, T_g] @ b[:, T_g].T over group g's consecutive tokens -> [G, M, N]."""
    return grouped_gemm_wgrad_p.bind(a, a_s, b, b_s, group_sizes, out_dtype=np.dtype(out_dtype))
