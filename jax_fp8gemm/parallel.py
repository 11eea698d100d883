"""Expert-parallel mixture-of-experts: experts sharded over a mesh axis, tokens dispatched to the
devices that own their experts with `jax.lax.all_to_all`, the local experts run as grouped FP8
GEMMs (`fg.ragged_dot`, FP8 forward and backward), results sent back and combined.

    logits = x @ w_router                                   # [T, E]
    y = moe_expert_parallel(x, logits, w_gate, w_up, w_down, top_k=2, mesh=mesh, axis="expert")

Layout: tokens `x [T, D]` and their router logits `[T, E]` are split over `axis` (data parallel
over the same devices), the expert weights `[E, D, F]` / `[E, F, D]` are split over `axis` along
E (E / n experts per device). Routing (softmax, top-k) runs per device inside the shard_map: under
automatic sharding XLA gathers `top_k`'s operand. `moe_local` is the per-device body, for use inside your own
`jax.shard_map`. The math is that of `jax_fp8gemm.flax.MoE` (SwiGLU experts, router-weighted
combination), so a sharded layer matches the single-device one.

Dispatch uses a fixed per-(source, destination) capacity of `capacity` rows: a dense
`all_to_all` of `[n, capacity, D]` buffers (shapes static, no host synchronisation). The default
capacity (every token of a device routed to one device) never drops a token; a smaller one (e.g.
`capacity_factor * T_local * k / n`) saves memory and traffic, and assignments past it are
dropped (they contribute zero), as in GShard/Switch. `jax.lax.ragged_all_to_all` would send only
the rows needed, but XLA:CPU does not implement it (UNIMPLEMENTED in jax 0.11.2), so the dense
exchange is the one path that runs, and is tested, everywhere.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from .dot import fp8_weight, ragged_dot


def route(logits: jax.Array, top_k: int) -> tuple[jax.Array, jax.Array]:
    """Softmax router: (weights [T, k] summing to 1 per token, expert ids [T, k] int32)."""
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    weights, experts = jax.lax.top_k(probs, top_k)
    return weights / jnp.sum(weights, axis=-1, keepdims=True), experts.astype(jnp.int32)


def expert_mlp(xs, w_gate, w_up, w_down, group_sizes, *, use_fp8=True, dtype=jnp.bfloat16):
    """SwiGLU experts on rows sorted by expert: xs [R, D], w_gate/w_up [G, D, F], w_down [G, F, D],
    group_sizes [G] -> [R, D] (rows past sum(group_sizes) are zero), in the down projection's own
    output dtype: `dtype` on the FP8 path (bf16 for bf16), float32 for jax.lax.ragged_dot."""
    if use_fp8:
        matmul = ragged_dot
    else:
        matmul = functools.partial(jax.lax.ragged_dot, preferred_element_type=jnp.float32)

    def weight(w):  # the FP8 path quantizes it straight from its parameter dtype (fp8_weight)
        return fp8_weight(w, dtype) if use_fp8 else w.astype(dtype)

    xs = xs.astype(dtype)
    gate = matmul(xs, weight(w_gate), group_sizes)
    up = matmul(xs, weight(w_up), group_sizes)
    h = (jax.nn.silu(gate.astype(jnp.float32)) * up.astype(jnp.float32)).astype(dtype)
    return matmul(h, weight(w_down), group_sizes)


def moe_local(x, logits, w_gate, w_up, w_down, *, top_k, axis_name, capacity=None,
              use_fp8=True, dtype=jnp.bfloat16):
    """The per-device body (inside shard_map over `axis_name`, n devices).

    x [T, D] this device's tokens; logits [T, E] their router logits (E = n * El);
    w_gate/w_up [El, D, F], w_down [El, F, D] this device's experts (global ids
    device * El + j). Returns [T, D] in x.dtype.
    """
    weights, experts = route(logits, top_k)
    n = jax.lax.axis_size(axis_name)
    n_tok, top_k = experts.shape
    d_model = x.shape[-1]
    local = w_gate.shape[0]
    assigned = n_tok * top_k
    cap = assigned if capacity is None else int(capacity)

    # 1. Sort this device's (token, choice) assignments by global expert: by destination
    #    device, then by its local expert. Slot = position within the destination's block.
    flat = experts.reshape(-1)
    order = jnp.argsort(flat, stable=True)
    expert_sorted = flat[order]
    dest = expert_sorted // local
    per_expert = jnp.bincount(flat, length=n * local).astype(jnp.int32)  # [n * El]
    per_dest = per_expert.reshape(n, local).sum(-1)
    dest_start = jnp.cumsum(per_dest) - per_dest
    slot = jnp.arange(assigned, dtype=jnp.int32) - dest_start[dest]
    kept = slot < cap
    target = jnp.where(kept, dest * cap + slot, n * cap)  # n * cap: dropped
    # On the FP8 path rows travel in `dtype` (bf16: half of float32's traffic): expert_mlp casts
    # them to it first anyway, and fg.ragged_dot's input gradient has that dtype too, so forward
    # and backward are unchanged. (jax.lax.ragged_dot hands back a float32 input gradient, which a
    # bf16 exchange would round: the bf16 A/B path keeps x's dtype.)
    wire = dtype if use_fp8 else x.dtype
    rows = x[order // top_k].astype(wire)
    send = jnp.zeros((n * cap, d_model), wire).at[target].set(rows, mode="drop")

    # 2. Exchange rows, and per-(source, local expert) counts, all to all.
    recv = jax.lax.all_to_all(send, axis_name, 0, 0, tiled=True)  # block s: from device s
    counts = jax.lax.all_to_all(per_expert.reshape(n, local), axis_name, 0, 0, tiled=True)
    ends = jnp.minimum(jnp.cumsum(counts, axis=-1), cap)  # rows past the capacity were dropped
    counts = jnp.diff(ends, axis=-1, prepend=0)  # [n (source), El]

    # 3. Group the received rows by local expert (each source's block is sorted already).
    pos = jnp.arange(cap, dtype=jnp.int32)
    row_expert = jnp.sum(pos[None, :, None] >= ends[:, None, :], axis=-1)  # [n, cap]; El: empty
    regroup = jnp.argsort(row_expert.reshape(-1), stable=True)
    group_sizes = counts.sum(0).astype(jnp.int32)
    out = expert_mlp(recv[regroup], w_gate, w_up, w_down, group_sizes, use_fp8=use_fp8,
                     dtype=dtype)
    out = jnp.zeros_like(out).at[regroup].set(out)

    # 4. Send the results back (in the GEMM's output dtype: exact), undo the sort, combine with
    #    the router weights in float32.
    back = jax.lax.all_to_all(out, axis_name, 0, 0, tiled=True).astype(jnp.float32)
    back = jnp.concatenate([back, jnp.zeros((1, d_model), back.dtype)])
    mine = back[target]  # dropped assignments read the zero row
    result = jnp.zeros_like(mine).at[order].set(mine).reshape(n_tok, top_k, d_model)
    y = jnp.einsum("tkd,tk->td", result, weights.astype(jnp.float32))
    return y.astype(x.dtype)


def dropped_assignments(logits, *, top_k, num_devices, capacity):
    """How many (token, choice) assignments a dispatch with `capacity` rows per (source,
    destination) drops, summed over the devices (tokens split over `num_devices` in contiguous
    blocks, experts in equal contiguous blocks, as moe_expert_parallel lays them out)."""
    _, experts = route(logits, top_k)
    local = logits.shape[-1] // num_devices
    dest = experts.reshape(num_devices, -1) // local  # [source, assignments]
    per_dest = jax.vmap(lambda d: jnp.bincount(d, length=num_devices))(dest)
    return jnp.sum(jnp.maximum(per_dest - capacity, 0))


def moe_expert_parallel(x, logits, w_gate, w_up, w_down, *, top_k, mesh, axis="expert",
                        capacity=None, use_fp8=True, dtype=jnp.bfloat16):
    """Expert-parallel MoE over `mesh` axis `axis` (see the module doc). x [T, D], router logits
    [T, E], w_gate/w_up [E, D, F], w_down [E, F, D]; T and E divisible by the axis size.
    Differentiable (jax.grad) in x, the logits and the expert weights."""
    body = functools.partial(moe_local, top_k=top_k, axis_name=axis, capacity=capacity,
                             use_fp8=use_fp8, dtype=dtype)
    spec = P(axis)
    return jax.shard_map(body, mesh=mesh, in_specs=(spec,) * 5, out_specs=spec)(
        x, logits, w_gate, w_up, w_down)
