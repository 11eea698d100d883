"""Flax layers that train in FP8 (1x128 / 128x128 block scaling, FP8 forward and backward).

NNX:   `Linear` (nnx.Linear with fg.dot_general), `MoE` (top-k routed experts on fg.ragged_dot).
Linen: `Dense` (nn.Dense with fg.dot_general).
Any existing layer can also take the drop-in directly: `nnx.Linear(..., dot_general=fg.dot_general)`
or `nn.Dense(..., dot_general=fg.dot_general)`. No extra state: scales are computed on the fly.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import nnx

from .dot import dot_general, fp8_weight
from .parallel import expert_mlp, route


def _promote_all_but_kernel(args, /, *, dtype=None, inexact=True):
    """nnx.Linear's promote_dtype, except that a kernel at least as wide as the compute dtype keeps
    its parameter dtype (fp8_weight): flax's copy in the compute dtype would be one more pass over
    every weight per step (0.23 ms of the 8.2 ms step of examples/train_mlp.py at d_model 4096;
    RESULTS.md, session 11)."""
    inputs, kernel, bias = args
    dtype = nnx.nn.dtypes.canonicalize_dtype(inputs, kernel, bias, dtype=dtype, inexact=inexact)
    bias = None if bias is None else jnp.asarray(bias, dtype)
    return jnp.asarray(inputs, dtype), fp8_weight(kernel, dtype), bias


class Linear(nnx.Linear):
    """nnx.Linear whose matmul runs in FP8 (same signature; `dot_general` defaults to ours, and with
    ours the kernel goes to it in its parameter dtype: the output has the compute dtype all the
    same)."""

    def __init__(self, in_features: int, out_features: int, *, rngs: nnx.Rngs, **kwargs):
        kwargs.setdefault("dot_general", dot_general)
        if kwargs["dot_general"] is dot_general:
            kwargs.setdefault("promote_dtype", _promote_all_but_kernel)
        super().__init__(in_features, out_features, rngs=rngs, **kwargs)


class Dense(nn.Dense):
    """flax.linen.Dense whose matmul runs in FP8."""

    dot_general: object = dot_general


class MoE(nnx.Module):
    """Top-k mixture of SwiGLU experts on grouped GEMMs.

    Tokens are routed (softmax router, top-k), sorted by expert, run through gate/up/down as
    ragged (grouped) matmuls, un-permuted and combined with the router weights. `use_fp8=False`
    runs the same layer with bf16 `jax.lax.ragged_dot`, for A/B comparisons.
    """

    def __init__(self, d_model: int, d_ff: int, num_experts: int, top_k: int = 2, *,
                 use_fp8: bool = True, dtype=jnp.bfloat16, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.router = nnx.Linear(d_model, num_experts, use_bias=False, rngs=rngs)
        self.w_gate = nnx.Param(init(rngs.params(), (num_experts, d_model, d_ff)))
        self.w_up = nnx.Param(init(rngs.params(), (num_experts, d_model, d_ff)))
        self.w_down = nnx.Param(init(rngs.params(), (num_experts, d_ff, d_model)))
        self.num_experts, self.top_k, self.use_fp8, self.dtype = num_experts, top_k, use_fp8, dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        lead, d_model = x.shape[:-1], x.shape[-1]
        tokens = x.reshape(-1, d_model)
        n_tok = tokens.shape[0]
        weights, experts = route(self.router(tokens.astype(jnp.float32)), self.top_k)  # [T, k]
        flat_expert = experts.reshape(-1)  # [T*k], token t's j-th choice at t*k + j
        order = jnp.argsort(flat_expert, stable=True)
        group_sizes = jnp.bincount(flat_expert, length=self.num_experts).astype(jnp.int32)
        xs = jnp.repeat(tokens, self.top_k, axis=0)[order]  # sorted by expert
        out = expert_mlp(xs, self.w_gate[...], self.w_up[...], self.w_down[...], group_sizes,
                         use_fp8=self.use_fp8, dtype=self.dtype).astype(jnp.float32)
        unsorted = jnp.zeros_like(out).at[order].set(out).reshape(n_tok, self.top_k, d_model)
        y = jnp.einsum("tkd,tk->td", unsorted, weights)
        return y.reshape(*lead, d_model).astype(x.dtype)
