"""Differentiable FP8 matmuls on unquantized inputs, FP8 in the forward AND the backward pass
(the DeepSeek-V3 recipe):

    forward  y  = x @ w        x: 1x128 groups along K,      w: 128x128 blocks
    dgrad    dx = dy @ w.T     dy: 1x128 groups along N,     w: the same 128x128 blocks
    wgrad    dw = x.T @ dy     x, dy: 1x128 groups along the token axis (contracted), FP32 out

Scales are computed per block on the fly: no state to thread through a training loop. The axis
each GEMM contracts (K forward, N in dgrad, tokens in wgrad) is zero-padded to a multiple of 128 by
the quantizer that writes the FP8 operand (`align`), which changes no result and copies nothing:
the kernels need a multiple of 16, and read and write rows that start on 128-byte lines faster.

Sharding: forward and backward are built from the sharded primitives, so a data-parallel (M),
tensor-parallel (N or K) or expert-parallel (G) layout stays sharded through the backward pass
(the weight gradient contracts the sharded token axis and is psummed). Inside shard_map the
cotangents are typed like their primals (_like_primal).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from .gemm import gemm
from .grouped import grouped_gemm
from .quantize import (quantize_blockwise_transpose, quantize_blockwise_transposed, quantize_rowwise,
                       quantize_rowwise_transpose)
from .wgrad import gemm_wgrad, grouped_gemm_wgrad

# The contracted axis of every FP8 operand, zero-padded by its quantizer to a multiple of ALIGN:
# TMA wants rows of a multiple of 16 bytes; at K = 16 mod 32 every other row starts mid-sector and
# the GEMMs run 15-31% slower than at K + 16 (grouped; the k-grouped wgrad 23%; sessions 56-57);
# and rows off 128-byte lines (32 mod 128) take two L2 requests per line's worth: the fused gelu
# quantizer ran 1.10x the time at 8224 tokens against 8320. 128 pads into the last 128-wide k-block,
# so no GEMM runs more k-blocks: an 8200-token fp8_mlp step 2.0% faster than with 32, fp8_dot at
# K = N = 4104 4.3%, steps at multiples of 128 unchanged (RESULTS.md, session 63).
ALIGN = 128
# The GEMMs store their output rows with TMA, a multiple of 16 bytes: 8 bf16 elements. A model axis
# that becomes an output row (either axis of a weight; dy's last, for wgrad) and is not a multiple
# of 8 is zero-padded here and the results are cut back: copies, for model widths that are rare.
STORE_ALIGN = 8


def _pad_for_store(v, *axes):
    """v zero-padded along `axes` to a multiple of STORE_ALIGN (v itself where they are already)."""
    axes = {a % v.ndim for a in axes}
    pad = [(0, -n % STORE_ALIGN if a in axes else 0) for a, n in enumerate(v.shape)]
    return jnp.pad(v, pad) if any(p for _, p in pad) else v


def _cut(v, *sizes):
    """v cut to `sizes` along its last len(sizes) axes (where _pad_for_store padded them)."""
    if v.shape[v.ndim - len(sizes):] == tuple(sizes):
        return v
    return v[(..., *(slice(0, s) for s in sizes))]


def _varying(aval) -> frozenset:
    mat = getattr(aval, "manual_axis_type", None)
    return frozenset(getattr(mat, "varying", ()) or ())


def _like_primal(ct, primal_type):
    """Types a cotangent like its primal (given by its aval), as custom_vjp requires.

    On a mesh with Explicit axes the cotangent takes the primal's sharding (the gradient keeps the
    layout of its parameter). Inside shard_map (check_vma), it must vary over exactly the manual
    axes its primal varies over: it is summed over the axes only it varies over (the transpose of
    using an invariant operand, e.g. replicated weights, with varying data) and marked varying
    over the axes only the primal varies over. Elsewhere this is the identity."""
    sharding = primal_type.sharding
    if (getattr(sharding.mesh, "_any_axis_explicit", False)
            and jax.typeof(ct).sharding.spec != sharding.spec):
        ct = jax.sharding.reshard(ct, sharding)
    ct_axes, primal_axes = _varying(jax.typeof(ct)), _varying(primal_type)
    extra = tuple(a for a in ct_axes if a not in primal_axes)
    if extra:
        ct = jax.lax.psum(ct, extra)
    missing = tuple(a for a in primal_axes if a not in ct_axes)
    if missing:
        ct = jax.lax.pcast(ct, missing, to="varying")
    return ct.astype(primal_type.dtype)


def _out_dtype(x, w):
    """The output dtype: float32 when both operands are float32, else bfloat16 (a bf16 activation
    with a float32 weight, e.g. a parameter quantized straight from its storage dtype: bf16)."""
    return jnp.float32 if x.dtype == jnp.float32 and w.dtype == jnp.float32 else jnp.bfloat16


def fp8_weight(w, dtype):
    """A weight as the FP8 ops should receive it for compute dtype `dtype`: as it is when its dtype
    is at least as wide (it is quantized straight from there, with no compute-dtype copy per step;
    the output dtype is unchanged: bf16 unless both operands are f32), else cast to `dtype`."""
    if dtype is None or jnp.finfo(w.dtype).bits >= jnp.finfo(dtype).bits:
        return w
    return w.astype(dtype)


def _grad_dtype(x):
    """dgrad's output: bf16 for a bf16 input (what bf16 autodiff gives), else float32. wgrad's
    too, for the weight's type: a bf16 weight's gradient comes out of the kernel in bf16 (one
    rounding of the FP32 accumulator), anything else in FP32."""
    return jnp.bfloat16 if x.dtype == jnp.bfloat16 else jnp.float32


# ------------------------------------------------------------------ fp8_dot
# Forward, for a call that is not differentiated: nothing to keep for a backward pass.
def _forward(x2, w):
    a, a_s = quantize_rowwise(x2, align=ALIGN)
    # w^T's [N, K] blocks, no copy of w^T
    b, b_s = quantize_blockwise_transposed(_pad_for_store(w, 1), align=ALIGN)
    return _cut(gemm(a, a_s, b, b_s, out_dtype=_out_dtype(x2, w)), w.shape[1])


def fp8_dot(x: jax.Array, w: jax.Array) -> jax.Array:
    """x [..., K] @ w [K, N] with FP8 operands and FP32 accumulation; differentiable in both.

    The output is float32 when both inputs are float32, else bfloat16.
    """
    _check_dot(x, w)
    return _fp8_dot(x, w, jax.typeof(x), jax.typeof(w))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _fp8_dot(x, w, x_type, w_type):
    y = _forward(x.reshape(-1, x.shape[-1]), w)
    return y.reshape(*x.shape[:-1], w.shape[1])


def _fp8_dot_fwd(x, w, x_type, w_type):
    # One pass over each input gives the forward operand and the one the backward pass needs:
    # x in 1x128 groups along K (forward) and along tokens (wgrad); w in 128x128 blocks as [N, K]
    # (forward) and [K, N] (dgrad). Only the FP8 copies are kept for the backward pass. Each comes
    # padded along the axis its GEMM contracts: a [T, K'], xt [K, T'], wq [K, N'], b [N, K'].
    k, n = w.shape
    a, a_s, xt, xt_s = quantize_rowwise_transpose(x.reshape(-1, k), align=ALIGN)
    wq, wq_s, b, b_s = quantize_blockwise_transpose(_pad_for_store(w, 0, 1), align=ALIGN)
    y = _cut(gemm(a, a_s, b, b_s, out_dtype=_out_dtype(x, w)), n)
    return y.reshape(*x.shape[:-1], n), (xt, xt_s, wq, wq_s)


def _fp8_dot_bwd(x_type, w_type, res, dy):
    xt, xt_s, wq, wq_s = res
    k, n = w_type.shape
    # dy in 1x128 groups along N (dgrad) and along tokens (wgrad), one pass.
    d, d_s, dt, dt_s = quantize_rowwise_transpose(_pad_for_store(dy.reshape(-1, n), 1), align=ALIGN)
    # dgrad: dy [M, N] @ w [K, N].T, the weight blocks in their other orientation.
    dx = _cut(gemm(d, d_s, wq, wq_s, out_dtype=_grad_dtype(dy)), k)
    # wgrad: x.T [K, M] @ dy.T [N, M].T, both grouped along the token axis M.
    dw = _cut(gemm_wgrad(xt, xt_s, dt, dt_s, out_dtype=_grad_dtype(w_type)), n)
    return _like_primal(dx.reshape(x_type.shape), x_type), _like_primal(dw, w_type)


_fp8_dot.defvjp(_fp8_dot_fwd, _fp8_dot_bwd)


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
def _as_matrix_product(lhs, rhs, dimension_numbers):
    """(x [..., K], w [K, N], output shape) when dot_general(lhs, rhs) is x @ w up to free
    reshapes: no batch axes, the contracted axes the trailing ones of lhs and, in the same order,
    a leading or trailing block of rhs's, with at least one axis of rhs left. Else None."""
    (lc, rc), (lb, rb) = dimension_numbers
    if lb or rb or not lc:
        return None
    pairs = sorted((l % lhs.ndim, r % rhs.ndim) for l, r in zip(lc, rc))
    lc, rc = [l for l, _ in pairs], [r for _, r in pairs]
    n_c = len(pairs)
    if lc != list(range(lhs.ndim - n_c, lhs.ndim)) or rhs.ndim == n_c:
        return None
    k = math.prod(lhs.shape[lhs.ndim - n_c:])
    if rc == list(range(n_c)):  # rhs [K..., N...]: Flax's kernels (Linear, LinearGeneral, Einsum)
        w, rhs_free = rhs.reshape(k, -1), rhs.shape[n_c:]
    elif rc == list(range(rhs.ndim - n_c, rhs.ndim)):  # rhs [N..., K...]
        w, rhs_free = rhs.reshape(-1, k).T, rhs.shape[:rhs.ndim - n_c]
    else:
        return None
    lhs_free = lhs.shape[:lhs.ndim - n_c]
    return lhs.reshape(*lhs_free, k), w, (*lhs_free, *rhs_free)


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                **kwargs):
    """Drop-in for jax.lax.dot_general (Flax accepts it as `dot_general=`).

    Accelerated: no batch axes, and lhs's trailing axes contracted with a leading or trailing
    block of rhs's axes in the same order, on floating inputs: `x [..., K] . w [K, N]` (Flax's
    kernel layout) or `x [..., K] . w [N, K]`, and their multi-axis forms such as
    `x [B, T, H, D] . w [H, D, E]` (nnx.LinearGeneral) or `x [B, T, D] . w [D, H, E]` (nnx.Einsum
    with `einsum_op=fg.einsum`), which are x @ w after free reshapes. Everything else (and any
    call with an explicit out_sharding) is jax.lax.dot_general exactly. `precision` is ignored on
    the FP8 path (FP8 operands, FP32 accumulation).
    """
    floating = all(jnp.issubdtype(v.dtype, jnp.floating) and v.dtype.itemsize >= 2
                   for v in (lhs, rhs))
    product = _as_matrix_product(lhs, rhs, dimension_numbers) if floating else None
    if product is not None and kwargs.get("out_sharding") is None:
        x, w, out_shape = product
        out = fp8_dot(x, w).reshape(out_shape)
        return out.astype(preferred_element_type) if preferred_element_type is not None else out
    return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                               preferred_element_type=preferred_element_type, **kwargs)


def einsum(subscripts, *operands, **kwargs):
    """Drop-in for jnp.einsum (nnx.Einsum takes it as `einsum_op=`): each contraction of two
    operands goes through `dot_general` above, so those that are x @ w up to free reshapes run
    in FP8 and the rest as jnp.einsum does."""
    return jnp.einsum(subscripts, *operands, _dot_general=dot_general, **kwargs)


# ------------------------------------------------------------------ ragged_dot drop-in
def _ragged(lhs, rhs, group_sizes):
    return _ragged_vjp(lhs, rhs, group_sizes, jax.typeof(lhs), jax.typeof(rhs))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _ragged_vjp(lhs, rhs, group_sizes, lhs_type, rhs_type):
    a, a_s = quantize_rowwise(lhs, align=ALIGN)
    b, b_s = quantize_blockwise_transposed(_pad_for_store(rhs, 2), align=ALIGN)  # [G, N, K']
    return _cut(grouped_gemm(a, a_s, b, b_s, group_sizes, out_dtype=_out_dtype(lhs, rhs)), rhs.shape[2])


def _ragged_fwd(lhs, rhs, group_sizes, lhs_type, rhs_type):
    # As fp8_dot: lhs quantized along K (forward) and along tokens (wgrad), rhs blocks as
    # [G, N, K] (forward) and [G, K, N] (dgrad), each in one pass; the FP8 copies are kept
    # (padded along their contracted axes, as in fp8_dot).
    a, a_s, lt, lt_s = quantize_rowwise_transpose(lhs, align=ALIGN)
    rq, rq_s, b, b_s = quantize_blockwise_transpose(_pad_for_store(rhs, 1, 2), align=ALIGN)
    y = _cut(grouped_gemm(a, a_s, b, b_s, group_sizes, out_dtype=_out_dtype(lhs, rhs)), rhs.shape[2])
    return y, (lt, lt_s, rq, rq_s, group_sizes)


def _ragged_bwd(lhs_type, rhs_type, res, dy):
    lt, lt_s, rq, rq_s, group_sizes = res
    k, n = rhs_type.shape[1:]
    d, d_s, dt, dt_s = quantize_rowwise_transpose(_pad_for_store(dy, 1), align=ALIGN)
    # dgrad: row r of dy times rhs[g(r)] [K, N] read as [N'=K, K'=N] blockwise.
    dlhs = _cut(grouped_gemm(d, d_s, rq, rq_s, group_sizes, out_dtype=_grad_dtype(dy)), k)
    # wgrad: per group, lhs_g.T [K, M_g] @ dy_g [M_g, N], 1x128 along tokens.
    drhs = _cut(grouped_gemm_wgrad(lt, lt_s, dt, dt_s, group_sizes, out_dtype=_grad_dtype(rhs_type)), n)
    no_grad = np.zeros(group_sizes.shape, dtype=jax.dtypes.float0)  # integer input
    return _like_primal(dlhs, lhs_type), _like_primal(drhs, rhs_type), no_grad


_ragged_vjp.defvjp(_ragged_fwd, _ragged_bwd)


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
