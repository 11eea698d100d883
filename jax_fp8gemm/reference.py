"""The math of every op in plain jnp: the CPU / non-Hopper path and the test oracle.

Each function here is what the corresponding CUDA kernel computes. The quantizers are bitwise the
kernels' math (same operation order and rounding); the GEMMs are the exact real-number result of
the quantized operands, computed in float32 with HIGHEST precision (the kernels accumulate in
FP32 too, in a different order, so the two agree to rounding).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

GROUP = 128  # elements that share one scale: 1x128 row-wise groups, 128x128 weight blocks
E4M3_MAX = 448.0  # largest finite float8_e4m3fn value
FP8 = jnp.float8_e4m3fn
# amax * (1/448) rather than amax / 448: XLA rewrites division by a constant into this product,
# so spelling it out keeps the reference and the kernels bitwise equal on every backend.
_INV_E4M3_MAX = np.float32(1.0) / np.float32(E4M3_MAX)
_MIN_SCALE = np.float32(np.finfo(np.float32).tiny)  # floor: an all-zero group stays finite


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def group_amax(g: jax.Array, axis) -> jax.Array:
    """max |g| over `axis`; NaN if the group holds a NaN. Spelled out because XLA:CPU's
    vectorised max-reduction can drop NaNs, while the kernels (and XLA:GPU) propagate them."""
    amax = jnp.max(jnp.abs(g), axis=axis)
    return jnp.where(jnp.any(jnp.isnan(g), axis=axis), jnp.nan, amax)


def scale_from_amax(amax: jax.Array, pow2_scale: bool) -> jax.Array:
    """amax/448, floored at FLT_MIN (NaN stays NaN), optionally rounded up to a power of two."""
    s = amax.astype(jnp.float32) * _INV_E4M3_MAX
    s = jnp.where(s < _MIN_SCALE, _MIN_SCALE, s)
    if pow2_scale:
        bits = jax.lax.bitcast_convert_type(s, jnp.uint32)
        exponent, mantissa = np.uint32(0x7F800000), np.uint32(0x007FFFFF)
        round_up = ((bits & exponent) != exponent) & ((bits & mantissa) != 0)
        bits = jnp.where(round_up, (bits + np.uint32(0x00800000)) & np.uint32(0xFF800000), bits)
        s = jax.lax.bitcast_convert_type(bits, jnp.float32)
    return s


def _reciprocal(s: jax.Array) -> jax.Array:
    """1/s, applied as a product: XLA rewrites x / broadcast(s) into x * broadcast(1/s) on some
    backends, so the math is defined this way everywhere (kernels included)."""
    return np.float32(1.0) / s


def _to_fp8(v: jax.Array) -> jax.Array:
    """Saturating cast: |v| > 448 becomes +-448 (e4m3fn has no inf), NaN stays NaN."""
    return jnp.clip(v, -E4M3_MAX, E4M3_MAX).astype(FP8)


def _pad_axis(x: jax.Array, axis: int, multiple: int) -> jax.Array:
    size = x.shape[axis]
    extra = cdiv(size, multiple) * multiple - size
    if extra == 0:
        return x
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, extra)
    return jnp.pad(x, pad)


def padded(size: int, align: int) -> int:
    """An FP8 operand's row length: `size` zero-padded to a multiple of `align` (the quantizers'
    `align`; the padding stays inside the last 128-group for align <= 128)."""
    return cdiv(size, align) * align


# Every quantizer takes `align`: its FP8 outputs' last axis comes zero-padded to a multiple of it,
# i.e. the values are those of x padded with zeros (which changes no scale). The math below works
# on 128-padded groups anyway, so the padding is a longer slice of the same values.
def quantize_rowwise(x: jax.Array, pow2_scale: bool = False, align: int = 1) -> tuple[jax.Array, jax.Array]:
    """x [..., K] -> q [..., padded(K, align)] e4m3, s [..., cdiv(K,128)] f32 (1x128 groups along K)."""
    k = x.shape[-1]
    kb = cdiv(k, GROUP)
    g = _pad_axis(x.astype(jnp.float32), -1, GROUP).reshape(*x.shape[:-1], kb, GROUP)
    s = scale_from_amax(group_amax(g, -1), pow2_scale)
    q = _to_fp8(g * _reciprocal(s)[..., None]).reshape(*x.shape[:-1], kb * GROUP)[..., :padded(k, align)]
    return q, s


def _quantize_blocks(w: jax.Array, pow2_scale: bool) -> tuple[jax.Array, jax.Array]:
    """w [..., N, K] -> q [..., 128 cdiv(N,128), 128 cdiv(K,128)] (zero-padded blocks), s."""
    *lead, n, k = w.shape
    nb, kb = cdiv(n, GROUP), cdiv(k, GROUP)
    g = _pad_axis(_pad_axis(w.astype(jnp.float32), -1, GROUP), -2, GROUP)
    g = g.reshape(*lead, nb, GROUP, kb, GROUP)
    s = scale_from_amax(group_amax(g, (-3, -1)), pow2_scale)
    q = _to_fp8(g * _reciprocal(s)[..., :, None, :, None]).reshape(*lead, nb * GROUP, kb * GROUP)
    return q, s


def quantize_blockwise(w: jax.Array, pow2_scale: bool = False, align: int = 1) -> tuple[jax.Array, jax.Array]:
    """w [..., N, K] -> q [..., N, padded(K, align)] e4m3, s [..., cdiv(N,128), cdiv(K,128)] f32."""
    n, k = w.shape[-2:]
    q, s = _quantize_blocks(w, pow2_scale)
    return q[..., :n, :padded(k, align)], s


def quantize_rowwise_transpose(x: jax.Array, pow2_scale: bool = False, align: int = 1):
    """x [..., R, C] -> (q, s) = quantize_rowwise(x) and (qt, st) = quantize_rowwise(x^T): the
    row-wise operand and the transposed one (1x128 groups along R) of one tensor."""
    q, s = quantize_rowwise(x, pow2_scale, align)
    qt, st = quantize_rowwise(jnp.swapaxes(x, -1, -2), pow2_scale, align)
    return q, s, qt, st


# Activations the row-wise quantize + transpose can apply on the fly (fp8_mlp's hidden layer):
# forward act(u), and the gradient g * act'(u), computed in float32 and rounded to the input's
# dtype (as an unfused pass would store them). gelu is jax.nn.gelu's tanh form, with
# (1 + tanh(z)) / 2 evaluated as sigmoid(2z) (no cancellation for z << 0), z = sqrt(2/pi) (u + c u^3)
# folded into 2z log2(e) = -u (k0 + k1 u^2); the kernels use the same formulas and constants
# (cuda/quantize/quantize_math.cuh).
_SQRT_2_OVER_PI, _LOG2_E, _GELU_C = 0.7978845608028654, 1.4426950408889634, 0.044715
_SIGMOID_K0 = -2.0 * _LOG2_E * _SQRT_2_OVER_PI
_SIGMOID_K1 = -2.0 * _LOG2_E * _SQRT_2_OVER_PI * _GELU_C
_GELU_GRAD_K0 = 2.0 * _SQRT_2_OVER_PI  # d(2z)/du = k0 + k1 u^2
_GELU_GRAD_K1 = 2.0 * _SQRT_2_OVER_PI * 3.0 * _GELU_C


def _gelu_sigmoid(u, u2):
    return 1.0 / (1.0 + jnp.exp2(u * (_SIGMOID_K1 * u2 + _SIGMOID_K0)))


def _gelu(u):
    return u * _gelu_sigmoid(u, u * u)


def _gelu_grad(u):
    u2 = u * u
    p = _gelu_sigmoid(u, u2)
    return (u * (p * (1.0 - p))) * (_GELU_GRAD_K1 * u2 + _GELU_GRAD_K0) + p


ACTIVATIONS = {"gelu": (_gelu, _gelu_grad)}  # name -> (act, act'); gelu = jax.nn.gelu's tanh form


def activate(x: jax.Array, activation: str) -> jax.Array:
    return ACTIVATIONS[activation][0](x.astype(jnp.float32)).astype(x.dtype)


def activation_grad(g: jax.Array, u: jax.Array, activation: str) -> jax.Array:
    """g * act'(u), in g's dtype."""
    return (g.astype(jnp.float32) * ACTIVATIONS[activation][1](u.astype(jnp.float32))).astype(g.dtype)


def quantize_blockwise_transpose(w: jax.Array, pow2_scale: bool = False, align: int = 1):
    """w [..., R, C] -> (q, s) = quantize_blockwise(w) and its transpose (qt, st) = (q^T, s^T),
    which is quantize_blockwise(w^T): a 128x128 block has one scale in either orientation."""
    r, c = w.shape[-2:]
    q, s = _quantize_blocks(w, pow2_scale)
    qt = jnp.swapaxes(q, -1, -2)
    return q[..., :r, :padded(c, align)], s, qt[..., :c, :padded(r, align)], jnp.swapaxes(s, -1, -2)


def dequantize_rowwise(q: jax.Array, s: jax.Array) -> jax.Array:
    """Inverse of quantize_rowwise, in float32."""
    scale = jnp.repeat(s, GROUP, axis=-1)[..., : q.shape[-1]]
    return q.astype(jnp.float32) * scale


def dequantize_blockwise(q: jax.Array, s: jax.Array) -> jax.Array:
    """Inverse of quantize_blockwise, in float32."""
    n, k = q.shape[-2:]
    scale = jnp.repeat(jnp.repeat(s, GROUP, axis=-2), GROUP, axis=-1)[..., :n, :k]
    return q.astype(jnp.float32) * scale


def _nt(a: jax.Array, b: jax.Array) -> jax.Array:
    """a [..., M, K] @ b [..., N, K]^T in float32 at full precision."""
    return jnp.einsum("...mk,...nk->...mn", a, b, precision=jax.lax.Precision.HIGHEST,
                      preferred_element_type=jnp.float32)


def gemm(a, a_s, b, b_s, out_dtype=jnp.bfloat16):
    """a [M, K] (1x128 scales) x b [N, K] (128x128 scales) -> [M, N] = a @ b.T."""
    return _nt(dequantize_rowwise(a, a_s), dequantize_blockwise(b, b_s)).astype(out_dtype)


def clamp_group_sizes(group_sizes: jax.Array, m: int) -> jax.Array:
    """Negative sizes count as 0 and sizes that run past M are cut at M (what the kernels do)."""
    ends = jnp.minimum(jnp.cumsum(jnp.maximum(group_sizes.astype(jnp.int32), 0)), m)
    return jnp.diff(ends, prepend=0).astype(jnp.int32)


def group_ids(group_sizes: jax.Array, m: int) -> jax.Array:
    """Group index of every row of a contiguous layout; G (out of range) for rows past the sum."""
    ends = jnp.cumsum(clamp_group_sizes(group_sizes, m))
    return jnp.searchsorted(ends, jnp.arange(m, dtype=jnp.int32), side="right").astype(jnp.int32)


def grouped_gemm(a, a_s, b, b_s, group_sizes, out_dtype=jnp.bfloat16):
    """Contiguous layout: a [M, K] rows sorted by group, b [G, N, K] -> [M, N].

    Row r belongs to group g when sum(sizes[:g]) <= r < sum(sizes[:g+1]); rows past the sum are 0.
    """
    m = a.shape[0]
    sizes = clamp_group_sizes(group_sizes, m)
    a_f = dequantize_rowwise(a, a_s)
    b_f = dequantize_blockwise(b, b_s)
    out = jax.lax.ragged_dot(a_f, jnp.swapaxes(b_f, 1, 2), sizes,
                             precision=jax.lax.Precision.HIGHEST,
                             preferred_element_type=jnp.float32)
    inside = jnp.arange(m) < jnp.sum(sizes)
    return jnp.where(inside[:, None], out, 0.0).astype(out_dtype)


def grouped_gemm_masked(a, a_s, b, b_s, masked_m, out_dtype=jnp.bfloat16):
    """Masked layout: a [G, Mmax, K], b [G, N, K] -> [G, Mmax, N]; rows >= masked_m[g] are 0."""
    out = _nt(dequantize_rowwise(a, a_s), dequantize_blockwise(b, b_s))
    rows = jnp.arange(a.shape[1])[None, :, None]
    return jnp.where(rows < masked_m.astype(jnp.int32)[:, None, None], out, 0.0).astype(out_dtype)


def gemm_wgrad(a, a_s, b, b_s, out_dtype=jnp.float32):
    """Weight-gradient GEMM: a [M, T], b [N, T], both with 1x128 scales along the token axis T
    ([M, cdiv(T,128)], [N, cdiv(T,128)]) -> [M, N] = a @ b.T, contracted over tokens."""
    return _nt(dequantize_rowwise(a, a_s), dequantize_rowwise(b, b_s)).astype(out_dtype)


def grouped_gemm_wgrad(a, a_s, b, b_s, group_sizes, out_dtype=jnp.float32):
    """k-grouped weight gradient: tokens T split into consecutive groups by group_sizes [G];
    out[g] = a[:, tokens of g] @ b[:, tokens of g].T -> [G, M, N]. Tokens past the sum are unused."""
    t = a.shape[-1]
    ids = group_ids(group_sizes, t)  # [T], G for unused tokens
    onehot = (ids[None, :] == jnp.arange(group_sizes.shape[0])[:, None]).astype(jnp.float32)
    a_f = dequantize_rowwise(a, a_s)
    b_f = dequantize_rowwise(b, b_s)
    out = jnp.einsum("gt,mt,nt->gmn", onehot, a_f, b_f, precision=jax.lax.Precision.HIGHEST,
                     preferred_element_type=jnp.float32)
    return out.astype(out_dtype)
