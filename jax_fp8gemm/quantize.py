"""Quantization ops: 1x128 row-wise (activations) and 128x128 blockwise (weights), and inverses.

Each primitive keeps its rules together: abstract eval (the argument checks), the CUDA kernel
lowering (cuda/quantize/), the reference lowering (reference.py), batching and sharding.

Sharding: leading axes shard freely; the grouped axes (K for 1x128, N and K for 128x128) only where
every shard holds whole 128-wide groups (a multiple of 128 elements per shard), and the scales
shard with them. Otherwise the grouped axis is replicated. No communication either way.

`align`: every quantizer can zero-pad its FP8 outputs' last axis to a multiple of `align` (a power
of two up to 128) as it writes them, the padding the GEMMs' contracted axis wants (a multiple of 16
bytes for TMA; 128 is fastest, see dot.py ALIGN), with no copy of the input. Only an axis that is
not a multiple of 128 is ever padded, and such an axis is replicated anyway. It pays in the writing
too: the fused quantize + transpose writes rows of qt that are not whole 32-byte sectors (a token
count like 8200 without align) 8-27% slower than whole ones, and with a fused gelu up to 1.55x the
time: the tiles above and below write parts of one sector from different SMs (RESULTS.md, sessions
60 and 62). Rows of whole sectors off 128-byte lines still cost the fused gelu 1.08-1.10x (session
63). align=128 avoids both.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from . import _checks, _primitive, _sharding, reference
from ._sharding import Plan, spec
from .reference import FP8, GROUP, padded


def _check_align(op, align):
    if not isinstance(align, (int, np.integer)) or align < 1 or align > GROUP or align & (align - 1):
        raise ValueError(f"{op}: align must be a power of two from 1 to {GROUP}, got {align!r}")
    return int(align)


def _padded_shape(shape, align):
    return (*shape[:-1], padded(shape[-1], align))


# ---------------------------------------------------------------- sharding rules
def _padded_factor(r, name, factor, size, align):
    """The factor of an FP8 output's last axis: the input's, or a factor of its own where the
    output is padded (a different size; the input axis, not a multiple of 128, is replicated)."""
    return factor if padded(size, align) == size else r.fixed(f"{name}p")


def _rowwise_factors(shape, align):
    r = _sharding.Rule()
    lead = _sharding.leading("l", len(shape) - 1)
    k, kb = r.blocked("k", shape[-1])
    return r, lead + [k], lead + [_padded_factor(r, "k", k, shape[-1], align)], lead + [kb]


def _blockwise_factors(shape, align):
    r = _sharding.Rule()
    lead = _sharding.leading("l", len(shape) - 2)
    n, nb = r.blocked("n", shape[-2])
    k, kb = r.blocked("k", shape[-1])
    return r, lead + [n, k], lead + [n, _padded_factor(r, "k", k, shape[-1], align)], lead + [nb, kb]


def _rowwise_specs(layout, shape):
    """(data spec, scale spec) for data [..., K]: leading axes as proposed, K in whole groups."""
    dims = [layout.take(0, d, shape[d]) for d in range(len(shape) - 1)]
    dims.append(layout.take(0, len(shape) - 1, shape[-1], GROUP))
    return spec(*dims), spec(*dims)


def _blockwise_dims(layout, shape):
    """Mesh axes per dimension of data [..., N, K]: leading axes as proposed, N and K in whole
    128-element groups."""
    dims = [layout.take(0, d, shape[d]) for d in range(len(shape) - 2)]
    dims.append(layout.take(0, len(shape) - 2, shape[-2], GROUP))
    dims.append(layout.take(0, len(shape) - 1, shape[-1], GROUP))
    return dims


def _blockwise_specs(layout, shape):
    dims = _blockwise_dims(layout, shape)
    return spec(*dims), spec(*dims)


def _quantize_partition(factors, specs):
    def rule(x, *, align, **_):
        r, data, q, scales = factors(x.shape, align)
        return r.build([data], [q, scales])

    def plan(layout, x, **_):
        data, scales = specs(layout, x.shape)
        return Plan(in_specs=(data,), out_specs=(data, scales), local=lambda run, x: run(x))

    return _sharding.Partition(rule, plan)


def _dequantize_partition(factors, specs):
    def rule(q, s):
        r, data, _, scales = factors(q.shape, 1)
        return r.build([data, scales], [data])

    def plan(layout, q, s):
        data, scales = specs(layout, q.shape)
        return Plan(in_specs=(data, scales), out_specs=(data,), local=lambda run, q, s: run(q, s))

    return _sharding.Partition(rule, plan)


# ---------------------------------------------------------------- quantize_rowwise (1x128)
def _rowwise_abstract(x, *, pow2_scale, align):
    op = "quantize_rowwise"
    _checks.dtype_in(op, "x", x, _checks.FLOAT_INPUTS)
    _checks.rank(op, "x", x, 1, "[..., K]", at_least=True)
    return (ShapedArray(_padded_shape(x.shape, align), FP8),
            ShapedArray(_checks.rowwise_scale_shape(x.shape), jnp.float32))


def _rowwise_kernel(x, *, pow2_scale, align):
    """The kernel writes the scales MN-major ([groups, rows], rows over all leading axes: what the
    GEMMs load) and they are handed on transposed, so that in a quantize -> GEMM pipeline XLA
    cancels this transpose against the GEMM's `mn_major_scales` (no copy of the scales in between
    when rows % 4 == 0)."""
    groups = _checks.rowwise_scale_shape(x.shape)[-1]
    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    out = (jax.ShapeDtypeStruct(_padded_shape(x.shape, align), FP8),
           jax.ShapeDtypeStruct((groups, rows), jnp.float32))
    q, s = jax.ffi.ffi_call("fp8gemm_quantize_rowwise", out)(x, pow2_scale=pow2_scale)
    return q, s.T.reshape(*x.shape[:-1], groups)


quantize_rowwise_p = _primitive.define(
    "quantize_rowwise", abstract_eval=_rowwise_abstract,
    reference=lambda x, *, pow2_scale, align: reference.quantize_rowwise(x, pow2_scale, align),
    kernel=_rowwise_kernel, batching_rule=_primitive.batch_leading_axes, multiple_results=True,
    partition=_quantize_partition(_rowwise_factors, _rowwise_specs))


def quantize_rowwise(x: jax.Array, *, pow2_scale: bool = False,
                     align: int = 1) -> tuple[jax.Array, jax.Array]:
    """x [..., K] (f32/bf16/f16) -> (q [..., K] float8_e4m3fn, s [..., cdiv(K,128)] float32).

    s = amax(group) / 448 (at least FLT_MIN, so an all-zero group gives zeros, never NaN);
    q = saturate(x * (1/s)). With pow2_scale, s is rounded up to a power of two. A NaN in a group
    makes its scale and all its values NaN; an inf makes the scale inf, its own value NaN and the
    group's finite values 0. align (a power of two <= 128): q's last axis is zero-padded to a
    multiple of it, as if x had been (gemm wants K a multiple of 16, and runs faster at 32).
    """
    align = _check_align("quantize_rowwise", align)
    q, s = quantize_rowwise_p.bind(jnp.asarray(x), pow2_scale=bool(pow2_scale), align=align)
    return q, s


# ---------------------------------------------------------------- quantize_blockwise (128x128)
def _blockwise_abstract(w, *, pow2_scale, align):
    op = "quantize_blockwise"
    _checks.dtype_in(op, "w", w, _checks.FLOAT_INPUTS)
    _checks.rank(op, "w", w, 2, "[..., N, K]", at_least=True)
    return (ShapedArray(_padded_shape(w.shape, align), FP8),
            ShapedArray(_checks.blockwise_scale_shape(w.shape), jnp.float32))


def _blockwise_kernel(w, *, pow2_scale, align):
    out = (jax.ShapeDtypeStruct(_padded_shape(w.shape, align), FP8),
           jax.ShapeDtypeStruct(_checks.blockwise_scale_shape(w.shape), jnp.float32))
    return jax.ffi.ffi_call("fp8gemm_quantize_blockwise", out)(w, pow2_scale=pow2_scale)


quantize_blockwise_p = _primitive.define(
    "quantize_blockwise", abstract_eval=_blockwise_abstract,
    reference=lambda w, *, pow2_scale, align: reference.quantize_blockwise(w, pow2_scale, align),
    kernel=_blockwise_kernel, batching_rule=_primitive.batch_leading_axes, multiple_results=True,
    partition=_quantize_partition(_blockwise_factors, _blockwise_specs))


def quantize_blockwise(w: jax.Array, *, pow2_scale: bool = False,
                       align: int = 1) -> tuple[jax.Array, jax.Array]:
    """w [..., N, K] -> (q [..., N, K] float8_e4m3fn, s [..., cdiv(N,128), cdiv(K,128)] float32).

    Same scale rule (and `align`) as quantize_rowwise, over 128x128 blocks of the last two axes.
    """
    align = _check_align("quantize_blockwise", align)
    q, s = quantize_blockwise_p.bind(jnp.asarray(w), pow2_scale=bool(pow2_scale), align=align)
    return q, s


# ---------------------------------------------------------------- fused quantize + transpose
def _transpose_factors(shape, *, blockwise, align):
    r = _sharding.Rule()
    lead = _sharding.leading("l", len(shape) - 2)
    rows, rb = r.blocked("r", shape[-2])
    cols, cb = r.blocked("c", shape[-1])
    rows_p = _padded_factor(r, "r", rows, shape[-2], align)
    cols_p = _padded_factor(r, "c", cols, shape[-1], align)
    s, st = ([rb, cb], [cb, rb]) if blockwise else ([rows, cb], [cols, rb])
    return r, lead + [rows, cols], [lead + [rows, cols_p], lead + s, lead + [cols, rows_p], lead + st]


def _transpose_partition():
    def rule(x, *, blockwise, align, **_):
        r, data, outs = _transpose_factors(x.shape, blockwise=blockwise, align=align)
        return r.build([data], outs)

    def plan(layout, x, **_):
        # Scales follow their data: s like x, qt and st transposed (R and C in whole groups).
        *lead, rows, cols = _blockwise_dims(layout, x.shape)
        straight, transposed = spec(*lead, rows, cols), spec(*lead, cols, rows)
        return Plan(in_specs=(straight,), out_specs=(straight, straight, transposed, transposed),
                    local=lambda run, x: run(x))

    return _sharding.Partition(rule, plan)


def _transpose_shapes(x_shape, blockwise, align):
    t_shape = (*x_shape[:-2], x_shape[-1], x_shape[-2])
    scale = _checks.blockwise_scale_shape if blockwise else _checks.rowwise_scale_shape
    return ((_padded_shape(x_shape, align), FP8), (scale(x_shape), jnp.float32),
            (_padded_shape(t_shape, align), FP8), (scale(t_shape), jnp.float32))


_ACTIVATION_CODES = {None: 0, "gelu": 1}  # cuda/quantize/quantize_math.cuh Act (the grad: 2)


def _check_activation(op, activation):
    if activation not in _ACTIVATION_CODES:
        raise ValueError(f"{op}: activation must be one of {sorted(map(str, _ACTIVATION_CODES))}, "
                         f"got {activation!r}")


def _transpose_abstract(x, *, pow2_scale, blockwise, activation, align):
    op = "quantize_blockwise_transpose" if blockwise else "quantize_rowwise_transpose"
    _checks.dtype_in(op, "x", x, _checks.FLOAT_INPUTS)
    _checks.rank(op, "x", x, 2, "[..., R, C]", at_least=True)
    _check_activation(op, activation)
    return tuple(ShapedArray(shape, dtype)
                 for shape, dtype in _transpose_shapes(x.shape, blockwise, align))


def _transpose_ffi(target, inputs, *, row_wise, align, **attrs):
    """The kernel writes row-wise scales MN-major ([..., groups, rows]: coalesced, and what the
    GEMMs load); they are handed on transposed to the usual layout, a transpose that XLA cancels
    against the consumers' `mn_major_scales`."""
    shapes = _transpose_shapes(inputs[0].shape, not row_wise, align)
    mn_major = lambda shape: (*shape[:-2], shape[-1], shape[-2])
    if row_wise:
        shapes = tuple((mn_major(shape) if i % 2 else shape, dtype)
                       for i, (shape, dtype) in enumerate(shapes))
    q, s, qt, st = jax.ffi.ffi_call(target, tuple(
        jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in shapes))(*inputs, **attrs)
    if row_wise:
        s, st = jnp.swapaxes(s, -1, -2), jnp.swapaxes(st, -1, -2)
    return q, s, qt, st


def _transpose_kernel(x, *, pow2_scale, blockwise, activation, align):
    return _transpose_ffi("fp8gemm_quantize_transpose", (x,), row_wise=not blockwise, align=align,
                          pow2_scale=pow2_scale, blockwise=blockwise,
                          activation=np.int32(_ACTIVATION_CODES[activation]))


def _transpose_reference(x, *, pow2_scale, blockwise, activation, align):
    if blockwise:
        return reference.quantize_blockwise_transpose(x, pow2_scale, align)
    if activation is not None:
        x = reference.activate(x, activation)
    return reference.quantize_rowwise_transpose(x, pow2_scale, align)


quantize_transpose_p = _primitive.define(
    "quantize_transpose", abstract_eval=_transpose_abstract, reference=_transpose_reference,
    kernel=_transpose_kernel, batching_rule=_primitive.batch_leading_axes, multiple_results=True,
    partition=_transpose_partition())


def quantize_rowwise_transpose(x: jax.Array, *, pow2_scale: bool = False, activation=None,
                               align: int = 1):
    """x [..., R, C] -> (q, s, qt, st) in one pass over x (the fused kernel on Hopper):
    q, s = quantize_rowwise(x) and qt, st = quantize_rowwise(x^T) (qt [..., C, R], 1x128 groups
    along R). Training uses both: q for the forward/dgrad GEMM, qt for the weight gradient.
    activation="gelu": the same for gelu(x) (reference.ACTIVATIONS), computed on the fly and
    rounded to x's dtype, never written out. align: as quantize_rowwise's, for q and qt each;
    align=128 where R is not a multiple of 128 (e.g. 8200 tokens) makes qt's rows whole 128-byte
    lines, which this kernel writes up to 1.5x faster (1.1x against align=32 with gelu) and the
    wgrad GEMM loads faster."""
    align = _check_align("quantize_rowwise_transpose", align)
    return tuple(quantize_transpose_p.bind(jnp.asarray(x), pow2_scale=bool(pow2_scale),
                                           blockwise=False, activation=activation, align=align))


# The gradient through a fused activation: g * act'(u), quantized both ways in one pass.
def _act_grad_abstract(g, u, *, pow2_scale, activation, align):
    op = "quantize_rowwise_transpose_act_grad"
    _checks.dtype_in(op, "g", g, _checks.FLOAT_INPUTS)
    _checks.rank(op, "g", g, 2, "[..., R, C]", at_least=True)
    if u.shape != g.shape or u.dtype != g.dtype:
        raise ValueError(f"{op}: u must have g's shape and dtype {g.shape} {g.dtype}, "
                         f"got {u.shape} {u.dtype}")
    _check_activation(op, activation)
    if activation is None:
        raise ValueError(f"{op}: activation is required")
    return _transpose_abstract(g, pow2_scale=pow2_scale, blockwise=False, activation=activation,
                               align=align)


def _act_grad_kernel(g, u, *, pow2_scale, activation, align):
    assert activation == "gelu"
    return _transpose_ffi("fp8gemm_quantize_transpose_act_grad", (g, u), row_wise=True, align=align,
                          pow2_scale=pow2_scale, activation=np.int32(1))


def _act_grad_reference(g, u, *, pow2_scale, activation, align):
    return reference.quantize_rowwise_transpose(reference.activation_grad(g, u, activation), pow2_scale,
                                                align)


def _act_grad_partition():
    base = _transpose_partition()

    def rule(g, u, *, align, **params):
        r, data, outs = _transpose_factors(g.shape, blockwise=False, align=align)
        return r.build([data, data], outs)

    def plan(layout, g, u, **params):
        p = base.plan(layout, g, blockwise=False)
        return Plan(in_specs=p.in_specs * 2, out_specs=p.out_specs, local=lambda run, g, u: run(g, u))

    return _sharding.Partition(rule, plan)


quantize_act_grad_transpose_p = _primitive.define(
    "quantize_act_grad_transpose", abstract_eval=_act_grad_abstract, reference=_act_grad_reference,
    kernel=_act_grad_kernel, batching_rule=_primitive.batch_leading_axes, multiple_results=True,
    partition=_act_grad_partition())


def quantize_rowwise_transpose_act_grad(g: jax.Array, u: jax.Array, activation: str, *,
                                        pow2_scale: bool = False, align: int = 1):
    """quantize_rowwise_transpose(g * act'(u)) in one pass over g and u (the product, in g's
    dtype, is never written out): the gradient of act(u) quantized for the dgrad and wgrad GEMMs."""
    align = _check_align("quantize_rowwise_transpose_act_grad", align)
    return tuple(quantize_act_grad_transpose_p.bind(jnp.asarray(g), jnp.asarray(u),
                                                    pow2_scale=bool(pow2_scale),
                                                    activation=activation, align=align))


def quantize_blockwise_transpose(w: jax.Array, *, pow2_scale: bool = False, align: int = 1):
    """w [..., R, C] -> (q, s, qt, st) in one pass: q, s = quantize_blockwise(w) and
    qt, st = quantize_blockwise(w^T), which are q^T and s^T (the forward and the dgrad operand;
    with align, each zero-padded along its own last axis)."""
    align = _check_align("quantize_blockwise_transpose", align)
    return tuple(quantize_transpose_p.bind(jnp.asarray(w), pow2_scale=bool(pow2_scale),
                                           blockwise=True, activation=None, align=align))


# Only the transposed half of quantize_blockwise_transpose: a weight stored [..., K, N] (Flax's
# layout) that a call needs only as the GEMMs' [..., N, K] blocks (a forward pass that is not
# differentiated). The fused kernel reads w once and writes qt and st alone; quantizing w^T
# instead would first copy the whole weight into the transposed layout (XLA materializes a custom
# call's transposed operand).
def _blockwise_t_abstract(w, *, pow2_scale, align):
    return _transpose_abstract(w, pow2_scale=pow2_scale, blockwise=True, activation=None, align=align)[2:]


def _blockwise_t_kernel(w, *, pow2_scale, align):
    (_, _, (t_shape, _), (st_shape, _)) = _transpose_shapes(w.shape, True, align)
    out = (jax.ShapeDtypeStruct((0,), FP8), jax.ShapeDtypeStruct((0,), jnp.float32),  # not written
           jax.ShapeDtypeStruct(t_shape, FP8), jax.ShapeDtypeStruct(st_shape, jnp.float32))
    _, _, qt, st = jax.ffi.ffi_call("fp8gemm_quantize_transpose", out)(
        w, pow2_scale=pow2_scale, blockwise=True, activation=np.int32(0))
    return qt, st


def _blockwise_t_partition():
    base = _transpose_partition()

    def rule(w, *, align, **_):
        r, data, outs = _transpose_factors(w.shape, blockwise=True, align=align)
        return r.build([data], outs[2:])

    def plan(layout, w, **_):
        p = base.plan(layout, w)
        return Plan(in_specs=p.in_specs, out_specs=p.out_specs[2:], local=lambda run, w: run(w))

    return _sharding.Partition(rule, plan)


quantize_blockwise_transposed_p = _primitive.define(
    "quantize_blockwise_transposed", abstract_eval=_blockwise_t_abstract,
    reference=lambda w, *, pow2_scale, align: (
        reference.quantize_blockwise_transpose(w, pow2_scale, align)[2:]),
    kernel=_blockwise_t_kernel, batching_rule=_primitive.batch_leading_axes, multiple_results=True,
    partition=_blockwise_t_partition())


def quantize_blockwise_transposed(w: jax.Array, *, pow2_scale: bool = False, align: int = 1):
    """w [..., R, C] -> (qt, st) = quantize_blockwise(w^T, align=align), from one pass over w and
    without writing w's own orientation (the second half of quantize_blockwise_transpose)."""
    align = _check_align("quantize_blockwise_transposed", align)
    return tuple(quantize_blockwise_transposed_p.bind(jnp.asarray(w), pow2_scale=bool(pow2_scale),
                                                      align=align))


# ---------------------------------------------------------------- dequantize (for checks)
def _dequant_rowwise_abstract(q, s):
    op = "dequantize_rowwise"
    _checks.fp8(op, "q", q)
    _checks.rank(op, "q", q, 1, "[..., K]", at_least=True)
    _checks.scales(op, "s", s, _checks.rowwise_scale_shape(q.shape))
    return ShapedArray(q.shape, jnp.float32)


def _dequant_blockwise_abstract(q, s):
    op = "dequantize_blockwise"
    _checks.fp8(op, "q", q)
    _checks.rank(op, "q", q, 2, "[..., N, K]", at_least=True)
    _checks.scales(op, "s", s, _checks.blockwise_scale_shape(q.shape))
    return ShapedArray(q.shape, jnp.float32)


dequantize_rowwise_p = _primitive.define(
    "dequantize_rowwise", abstract_eval=_dequant_rowwise_abstract,
    reference=reference.dequantize_rowwise, batching_rule=_primitive.batch_leading_axes,
    partition=_dequantize_partition(_rowwise_factors, _rowwise_specs))
dequantize_blockwise_p = _primitive.define(
    "dequantize_blockwise", abstract_eval=_dequant_blockwise_abstract,
    reference=reference.dequantize_blockwise, batching_rule=_primitive.batch_leading_axes,
    partition=_dequantize_partition(_blockwise_factors, _blockwise_specs))


def dequantize_rowwise(q: jax.Array, s: jax.Array) -> jax.Array:
    """Inverse of quantize_rowwise: q [..., K] e4m3, s [..., cdiv(K,128)] -> float32 [..., K]."""
    return dequantize_rowwise_p.bind(q, s)


def dequantize_blockwise(q: jax.Array, s: jax.Array) -> jax.Array:
    """Inverse of quantize_blockwise: q [..., N, K], s [..., cdiv(N,128), cdiv(K,128)] -> f32."""
    return dequantize_blockwise_p.bind(q, s)
