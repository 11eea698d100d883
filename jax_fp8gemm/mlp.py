"""A differentiable FP8 MLP block, y = act(x @ w_up) @ w_down, with the activation fused into the
quantization passes (the recipe of fp8_dot for both GEMMs):

    forward   u = x @ w_up (bf16, kept for the backward)   -> act(u) quantized both ways in one
              pass over u (never written out)              -> y = act(u) @ w_down
    backward  dh = dy @ w_down.T (bf16)                    -> dh * act'(u) quantized both ways in
              one pass over dh and u (never written out)   -> dx = du @ w_up.T, dw_up = x.T @ du;
              dw_down = act(u).T @ dy from the forward's transposed copy

Against two fp8_dot calls around an XLA activation this saves writing and re-reading act(u) in
the forward and du in the backward: two passes over a [tokens, d_ff] tensor each way.
"""

from __future__ import annotations

import functools

import jax

from .dot import ALIGN, _check_dot, _cut, _grad_dtype, _like_primal, _out_dtype, _pad_for_store
from .gemm import gemm
from .quantize import (quantize_blockwise_transpose, quantize_blockwise_transposed, quantize_rowwise,
                       quantize_rowwise_transpose, quantize_rowwise_transpose_act_grad)
from .reference import ACTIVATIONS
from .wgrad import gemm_wgrad


def fp8_mlp(x: jax.Array, w_up: jax.Array, w_down: jax.Array, activation: str = "gelu") -> jax.Array:
    """act(x [..., D] @ w_up [D, F]) @ w_down [F, O] with FP8 GEMMs in the forward and backward
    passes; differentiable in x, w_up and w_down. activation: "gelu" (jax.nn.gelu's tanh form).
    The hidden activation is bf16 unless x and w_up are float32; the output dtype follows
    fp8_dot's rule."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"fp8_mlp: activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    _check_dot(x, w_up)
    if w_down.ndim != 2 or w_down.shape[0] != w_up.shape[1]:
        raise ValueError(f"fp8_mlp: w_down must be [F, O] with F = w_up's {w_up.shape[1]}, got shape "
                         f"{w_down.shape}")
    types = tuple(jax.typeof(v) for v in (x, w_up, w_down))
    return _fp8_mlp(x, w_up, w_down, types, activation)


def _quantize_weight(w):
    """w [K, N] -> ([K, N'] blocks (dgrad operand), scales, [N, K'] blocks (forward operand), scales),
    each padded along the axis its GEMM contracts (fp8_dot's ALIGN); K and N first to multiples of 8
    where they are not (fp8_dot's _pad_for_store: the outputs' rows)."""
    return quantize_blockwise_transpose(_pad_for_store(w, 0, 1), align=ALIGN)


def _forward(x, w_up, w_down, activation):
    """(y [T, O], residuals) for x [T, D]."""
    a, a_s, xt, xt_s = quantize_rowwise_transpose(x, align=ALIGN)
    wu, wu_s, bu, bu_s = _quantize_weight(w_up)
    u = gemm(a, a_s, bu, bu_s, out_dtype=_out_dtype(x, w_up))  # [T, F] (F padded to 8: zeros)
    h, h_s, ht, ht_s = quantize_rowwise_transpose(u, activation=activation, align=ALIGN)
    wd, wd_s, bd, bd_s = _quantize_weight(w_down)
    y = _cut(gemm(h, h_s, bd, bd_s, out_dtype=_out_dtype(u, w_down)), w_down.shape[1])
    return y, (xt, xt_s, wu, wu_s, u, ht, ht_s, wd, wd_s)


def _forward_only(x, w_up, w_down, activation):
    """y [T, O] for x [T, D] when nothing is differentiated: no transposed copy of x; each weight
    is quantized in one pass (quantize_blockwise_transposed); the hidden layer's quantizer, the one that applies
    the activation, writes both orientations."""
    a, a_s = quantize_rowwise(x, align=ALIGN)
    bu, bu_s = quantize_blockwise_transposed(_pad_for_store(w_up, 1), align=ALIGN)
    u = gemm(a, a_s, bu, bu_s, out_dtype=_out_dtype(x, w_up))
    h, h_s, _, _ = quantize_rowwise_transpose(u, activation=activation, align=ALIGN)
    bd, bd_s = quantize_blockwise_transposed(_pad_for_store(w_down, 0, 1), align=ALIGN)
    return _cut(gemm(h, h_s, bd, bd_s, out_dtype=_out_dtype(u, w_down)), w_down.shape[1])


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _fp8_mlp(x, w_up, w_down, types, activation):
    y = _forward_only(x.reshape(-1, x.shape[-1]), w_up, w_down, activation)
    return y.reshape(*x.shape[:-1], y.shape[-1])


def _fp8_mlp_fwd(x, w_up, w_down, types, activation):
    y, res = _forward(x.reshape(-1, x.shape[-1]), w_up, w_down, activation)
    return y.reshape(*x.shape[:-1], y.shape[-1]), res


def _fp8_mlp_bwd(types, activation, res, dy):
    x_type, w_up_type, w_down_type = types
    xt, xt_s, wu, wu_s, u, ht, ht_s, wd, wd_s = res
    (d, f), o = w_up_type.shape, w_down_type.shape[1]
    g, g_s, gt, gt_s = quantize_rowwise_transpose(_pad_for_store(dy.reshape(-1, o), 1), align=ALIGN)
    dw_down = _cut(gemm_wgrad(ht, ht_s, gt, gt_s, out_dtype=_grad_dtype(w_down_type)), f, o)
    dh = gemm(g, g_s, wd, wd_s, out_dtype=u.dtype)  # [T, F], u's shape (F padded to 8)
    du, du_s, dut, dut_s = quantize_rowwise_transpose_act_grad(dh, u, activation, align=ALIGN)
    dx = _cut(gemm(du, du_s, wu, wu_s, out_dtype=_grad_dtype(dy)), d)
    dw_up = _cut(gemm_wgrad(xt, xt_s, dut, dut_s, out_dtype=_grad_dtype(w_up_type)), f)
    return (_like_primal(dx.reshape(x_type.shape), x_type), _like_primal(dw_up, w_up_type),
            _like_primal(dw_down, w_down_type))


_fp8_mlp.defvjp(_fp8_mlp_fwd, _fp8_mlp_bwd)
