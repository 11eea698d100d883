"""Flax layers that train in FP8 (1x128 / 128x128 block scaling, FP8 forward and backward).

NNX:   `Linear` (nnx.Linear with fg.dot_general), `MLP` (act(x @ up) @ down as one fg.fp8_mlp, the
       activation fused into the quantizations), `MoE` (top-k routed experts on fg.ragged_dot).
Linen: `Dense` (nn.Dense with fg.dot_general).
Any existing layer can also take the drop-ins directly: `nnx.Linear(..., dot_general=fg.dot_general)`,
`nnx.LinearGeneral(..., dot_general=fg.dot_general)`, `nnx.Einsum(..., einsum_op=fg.einsum)` or
`nn.Dense(..., dot_general=fg.dot_general)`. No extra state: scales are computed on the fly.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import nnx

from .dot import dot_general, fp8_weight
from .mlp import fp8_mlp
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


class MLP(nnx.Module):
    """act(x @ up) @ down without biases (a transformer MLP block) as one FP8 op, fg.fp8_mlp: the
    activation is applied inside the quantization passes, so act(u) and its gradient are never
    written out. `use_fp8=False` runs the same layer as two bf16 (compute dtype) matmuls around
    jax.nn.gelu, what two nnx.Linear layers compute, for A/B comparisons. Parameters: `up` [in,
    hidden], `down` [hidden, out], lecun_normal, in param_dtype."""

    def __init__(self, in_features: int, hidden_features: int, out_features: int | None = None, *,
                 activation: str = "gelu", use_fp8: bool = True, dtype=jnp.bfloat16,
                 param_dtype=jnp.float32, kernel_init=nnx.initializers.lecun_normal(),
                 rngs: nnx.Rngs):
        out_features = in_features if out_features is None else out_features
        self.up = nnx.Param(kernel_init(rngs.params(), (in_features, hidden_features), param_dtype))
        self.down = nnx.Param(kernel_init(rngs.params(), (hidden_features, out_features), param_dtype))
        self.activation, self.use_fp8, self.dtype = activation, use_fp8, dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.asarray(x, self.dtype)
        if self.use_fp8:
            return fp8_mlp(x, fp8_weight(self.up[...], self.dtype), fp8_weight(self.down[...], self.dtype),
                           self.activation)
        if self.activation != "gelu":
            raise ValueError(f"MLP: activation must be 'gelu', got {self.activation!r}")
        h = jax.nn.gelu(x @ jnp.asarray(self.up[...], self.dtype))
        return h @ jnp.asarray(self.down[...], self.dtype)


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
