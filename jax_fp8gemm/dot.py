"""Differentiable FP8 matmuls on unquantized inputs, FP8 in the forward AND the backward pass
(the DeepSeek-V3 recipe):

    forward  y  = x @ w        x: 1x128 groups along K,      w: 128x128 blocks
    dgrad    dx = dy @ w.T     dy: 1x128 groups along N,     w: the same 128x128 blocks
    wgrad    dw = x.T @ dy     x, dy: 1x128 groups along the token axis (contracted), FP32 out

Scales are computed per block on the fly: no state to thread through a training loop. Axes the
kernels need in multiples of 16 (K forward, N in dgrad, tokens in wgrad) are zero-padded here,
which changes no result.

Sharding: forward and backward are built from the sharded primitives, so a data-parallel (M),
tensor-parallel (N or K) or expert-parallel (G) layout stays sharded through the backward pass
(the weight gradient contracts the sharded token axis and is psummed). Inside shard_map the
cotangents are typed like their primals (_like_primal).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .gemm import gemm
from .grouped import grouped_gemm
from .quantize import quantize_blockwise, quantize_rowwise
from .wgrad import gemm_wgrad, grouped_gemm_wgrad

_ALIGN = 16


def _pad_to(x, axis, multiple=_ALIGN):
    extra = -x.shape[axis] % multiple
    if extra == 0:
        return x
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, extra)
    return jnp.pad(x, pad)


def _varying(x) -> frozenset:
    mat = getattr(jax.typeof(x), "manual_axis_type", None)
    return frozenset(getattr(mat, "varying", ()) or ())


def _like_primal(ct, primal):
    """Types a cotangent like its primal, as custom_vjp requires.

    On a mesh with Explicit axes the cotangent takes the primal's sharding (the gradient keeps the
    layout of its parameter). Inside shard_map (check_vma), it must vary over exactly the manual
    axes its primal varies over: it is summed over the axes only it varies over (the transpose of
    using an invariant operand, e.g. replicated weights, with varying data) and marked varying
    over the axes only the primal varies over. Elsewhere this is the identity."""
    sharding = jax.typeof(primal).sharding
    if (getattr(sharding.mesh, "_any_axis_explicit", False)
            and jax.typeof(ct).sharding.spec != sharding.spec):
        ct = jax.sharding.reshard(ct, sharding)
    ct_axes, primal_axes = _varying(ct), _varying(primal)
    extra = tuple(a for a in ct_axes if a not in primal_axes)
    if extra:
        ct = jax.lax.psum(ct, extra)
    missing = tuple(a for a in primal_axes if a not in ct_axes)
    if missing:
        ct = jax.lax.pcast(ct, missing, to="varying")
    return ct


def _out_dtype(*xs):
    dtype = jnp.result_type(*xs)
    return jnp.float32 if dtype == jnp.float32 else jnp.bfloat16


def _fp8_matmul_nt(x2, w_nk, out_dtype):
    """x2 [M, K] @ w_nk [N, K].T, both quantized here (x 1x128, w 128x128)."""
    a, a_s = quantize_rowwise(_pad_to(x2, -1))
    b, b_s = quantize_blockwise(_pad_to(w_nk, -1))
    return gemm(a, a_s, b, b_s, out_dtype=out_dtype)


def _wgrad(lhs_t, rhs_t):
    """lhs_t [P, T] @ rhs_t [Q, T].T contracted over tokens T, both 1x128 along T; FP32."""
    lhs_t, rhs_t = _pad_to(lhs_t, -1), _pad_to(rhs_t, -1)
    a, a_s = quantize_rowwise(lhs_t)
    b, b_s = quantize_rowwise(rhs_t)
    return gemm_wgrad(a, a_s, b, b_s)


@jax.custom_vjp
def fp8_dot(x: jax.Array, w: jax.Array) -> jax.Array:
    """x [..., K] @ w [K, N] with FP8 operands and FP32 accumulation; differentiable in both.

    The output is float32 when both inputs are float32, else bfloat16.
    """
    return _fp8_dot_fwd(x, w)[0]


def _fp8_dot_fwd(x, w):
    _check_dot(x, w)
    x2 = x.reshape(-1, x.shape[-1])
    y = _fp8_matmul_nt(x2, w.T, _out_dtype(x, w))
    return y.reshape(*x.shape[:-1], w.shape[1]), (x, w)


def _fp8_dot_bwd(res, dy):
    x, w = res
    x2 = x.reshape(-1, x.shape[-1])
    dy2 = dy.reshape(-1, dy.shape[-1])
    # dgrad: dy [M, N] @ w [K, N].T, the weight quantized in its other orientation.
    dx = _fp8_matmul_nt(dy2, w, jnp.float32)[:, : x.shape[-1]]
    # wgrad: x.T [K, M] @ dy.T [N, M].T, both grouped along the token axis M.
    dw = _wgrad(x2.T, dy2.T)
    dx = _like_primal(dx.reshape(x.shape), x)
    return dx.astype(x.dtype), _like_primal(dw, w).astype(w.dtype)


fp8_dot.defvjp(_fp8_dot_fwd, _fp8_dot_bwd)


def _check_dot(x, w):
    if w.ndim != 2:
        raise ValueError(f"fp8_dot: w must be [K, N] (rank 2), got shape {w.shape}")
    if x.ndim < 1 or x.shape[-1] != w.shape[0]:
        raise ValueError(f"fp8_dot: K (last axis) of x ({x.shape[-1] if x.ndim else None}) and "
                         f"first axis of w ({w.shape[0]}) must match")
    for name, v in (("x", x), ("w", w)):
        if v.dtype not in (jnp.float32, jnp.bfloat16, jnp.float16):
            raise TypeError(f"fp8_dot: {name} must have dtype float32, bfloat16 or float16, got {v.dtype}")


# ------------------------------------------------------------------ dot_general drop-in
def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                **kwargs):
    """Drop-in for jax.lax.dot_general (Flax accepts it as `dot_general=`).

    Accelerated: a 2-D rhs contracted with the last axis of lhs and no batch axes, i.e.
    `x [..., K] . w [K, N]` (Flax's kernel layout) or `x [..., K] . w [N, K]`, on floating inputs.
    Everything else (and any call with an explicit out_sharding) is jax.lax.dot_general exactly.
    `precision` is ignored on the FP8 path (FP8 operands, FP32 accumulation).
    """
    (lc, rc), (lb, rb) = dimension_numbers
    floating = all(jnp.issubdtype(v.dtype, jnp.floating) and v.dtype.itemsize >= 2
                   for v in (lhs, rhs))
    pattern = (not lb and not rb and len(lc) == 1 and len(rc) == 1 and rhs.ndim == 2
               and lhs.ndim >= 1 and lc[0] % lhs.ndim == lhs.ndim - 1)
    if floating and pattern and kwargs.get("out_sharding") is None:
        w = rhs if rc[0] % 2 == 0 else rhs.T
        out = fp8_dot(lhs, w)
        return out.astype(preferred_element_type) if preferred_element_type is not None else out
    return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                               preferred_element_type=preferred_element_type, **kwargs)


# ------------------------------------------------------------------ ragged_dot drop-in
@jax.custom_vjp
def _ragged(lhs, rhs, group_sizes):
    return _ragged_fwd(lhs, rhs, group_sizes)[0]


def _ragged_fwd(lhs, rhs, group_sizes):
    out_dtype = _out_dtype(lhs, rhs)
    a, a_s = quantize_rowwise(_pad_to(lhs, -1))
    b, b_s = quantize_blockwise(_pad_to(jnp.swapaxes(rhs, 1, 2), -1))  # [G, N, K]
    y = grouped_gemm(a, a_s, b, b_s, group_sizes, out_dtype=out_dtype)
    return y, (lhs, rhs, group_sizes)


def _ragged_bwd(res, dy):
    lhs, rhs, group_sizes = res
    k = lhs.shape[-1]
    # dgrad: row r of dy times rhs[g(r)] [K, N] read as [N'=K, K'=N] blockwise.
    a, a_s = quantize_rowwise(_pad_to(dy, -1))
    b, b_s = quantize_blockwise(_pad_to(rhs, -1))
    dlhs = grouped_gemm(a, a_s, b, b_s, group_sizes, out_dtype=jnp.float32)[:, :k]
    # wgrad: per group, lhs_g.T [K, M_g] @ dy_g [M_g, N], 1x128 along tokens.
    la, la_s = quantize_rowwise(_pad_to(lhs.T, -1))
    da, da_s = quantize_rowwise(_pad_to(dy.T, -1))
    drhs = grouped_gemm_wgrad(la, la_s, da, da_s, group_sizes)
    no_grad = np.zeros(group_sizes.shape, dtype=jax.dtypes.float0)  # integer input
    dlhs, drhs = _like_primal(dlhs, lhs), _like_primal(drhs, rhs)
    return dlhs.astype(lhs.dtype), drhs.astype(rhs.dtype), no_grad


_ragged.defvjp(_ragged_fwd, _ragged_bwd)


def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None, **kwargs):
    """Drop-in for jax.lax.ragged_dot: lhs [M, K], rhs [G, K, N], group_sizes int32 [G] -> [M, N],
    FP8 in forward and backward, differentiable in lhs and rhs. Other signatures fall back to
    jax.lax.ragged_dot exactly."""
    if (lhs.ndim == 2 and rhs.ndim == 3 and not kwargs and group_sizes.ndim == 1
            and all(jnp.issubdtype(v.dtype, jnp.floating) for v in (lhs, rhs))):
        out = _ragged(lhs, rhs, group_sizes.astype(jnp.int32))
        return out.astype(preferred_element_type) if preferred_element_type is not None else out
    return jax.lax.ragged_dot(lhs, rhs, group_sizes, precision=precision,
                              preferred_element_type=preferred_element_type, **kwargs)
