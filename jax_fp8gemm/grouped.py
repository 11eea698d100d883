"""Grouped FP8 GEMMs for mixture-of-experts.

grouped_gemm (contiguous layout, training / prefill): a [M, K] rows sorted by group, b [G, N, K],
group_sizes int32 [G] with jax.lax.ragged_dot semantics, no padding of groups.
grouped_gemm_masked (decode): a [G, Mmax, K], masked_m int32 [G]; rows >= masked_m[g] are zero.
Traced sizes are clamped (negative -> 0, past M / Mmax -> cut), never read out of bounds.
On Hopper both run the sm_90a grouped kernel (cuda/gemm/: GroupedScheduler, one launch, the
schedule derived on the device from the sizes; no host synchronisation) with a configuration
chosen here per static shape (gemm_config.pick_grouped); elsewhere the jnp reference does.

Sharding (rules next to the primitives): experts shard along G. Masked layout: G, Mmax and N shard
with no communication. Contiguous layout: a shard owning experts [g0, g0 + Gl) computes the rows
of those experts (found from group_sizes, which stays replicated) and the shards' outputs are
summed (each row is non-zero on one shard only); M of `a` shards with no communication (each shard
cuts the groups to its row window); N of `b` too. A sharded K is reduced in FP32 as in gemm, and
the scales follow their operands (N, K shard at multiples of 128 per shard only).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from . import _checks, _kernels, _primitive, _sharding, gemm_config, reference
from ._sharding import Plan, spec
from .gemm import check_operands, mn_major_scales, reduce_k, run_reduced
from .reference import GROUP, cdiv

_INT32_MAX = 2**31 - 1


def _contiguous_abstract(a, a_s, b, b_s, group_sizes, *, out_dtype):
    op = "grouped_gemm"
    _checks.rank(op, "a", a, 2, "[M, K]")
    check_operands(op, a, a_s, b, b_s, a_layout="[M, K]", b_rank=3)
    _checks.int32_vector(op, "group_sizes", group_sizes, b.shape[0])
    return ShapedArray((a.shape[0], b.shape[1]), _checks.out_dtype(op, out_dtype))


def _masked_abstract(a, a_s, b, b_s, masked_m, *, out_dtype):
    op = "grouped_gemm_masked"
    _checks.rank(op, "a", a, 3, "[G, Mmax, K]")
    check_operands(op, a, a_s, b, b_s, a_layout="[G, Mmax, K]", b_rank=3)
    _checks.same(op, "G (first axis)", "a", a.shape[0], "b", b.shape[0])
    _checks.int32_vector(op, "masked_m", masked_m, a.shape[0])
    return ShapedArray((a.shape[0], a.shape[1], b.shape[1]), _checks.out_dtype(op, out_dtype))


def _grouped_config(m, n, k, g, masked, out_dtype):
    return gemm_config.pick_grouped(m, n, k, g, _kernels.num_sms(), masked=masked, out_dtype=out_dtype)


# The contiguous-layout kernel's second result: the counter its CTAs take tiles from (set by the
# launch; cuda/gemm/fp8_gemm.h, GroupedGemmProblem::tile_counter).
_TILE_COUNTER = jax.ShapeDtypeStruct((1,), jnp.int32)


def grouped_gemm_kernel_call(a, a_s, b, b_s, group_sizes, config: gemm_config.GemmConfig,
                             out_dtype=jnp.bfloat16):
    """The contiguous-layout FFI call with an explicit configuration."""
    out = jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), out_dtype)
    d, _ = jax.ffi.ffi_call("fp8gemm_grouped_gemm", (out, _TILE_COUNTER))(
        a, mn_major_scales(a_s), b, b_s, group_sizes, **config.attributes())
    return d


def grouped_gemm_masked_kernel_call(a, a_s, b, b_s, masked_m, config: gemm_config.GemmConfig,
                                    out_dtype=jnp.bfloat16):
    """The masked-layout FFI call with an explicit configuration. A's scales [G, Mmax, Kb] go to
    the kernel MN-major over all G * Mmax rows: [Kb, align(G * Mmax, 4)]."""
    g, mmax, _ = a.shape
    out = jax.ShapeDtypeStruct((g, mmax, b.shape[1]), out_dtype)
    sfa = mn_major_scales(a_s.reshape(g * mmax, a_s.shape[-1]))
    return jax.ffi.ffi_call("fp8gemm_grouped_gemm_masked", out)(
        a, sfa, b, b_s, masked_m, **config.attributes())


def _contiguous_kernel(a, a_s, b, b_s, group_sizes, *, out_dtype):
    (m, k), (g, n, _) = a.shape, b.shape
    config = _grouped_config(m, n, k, g, masked=False, out_dtype=out_dtype)
    return grouped_gemm_kernel_call(a, a_s, b, b_s, group_sizes, config, out_dtype)


def _masked_kernel(a, a_s, b, b_s, masked_m, *, out_dtype):
    (g, mmax, k), n = a.shape, b.shape[1]
    config = _grouped_config(mmax, n, k, g, masked=True, out_dtype=out_dtype)
    return grouped_gemm_masked_kernel_call(a, a_s, b, b_s, masked_m, config, out_dtype)


def _kernel_takes(op, rows, g, n, k, out_dtype) -> bool:
    """Shapes the grouped kernel cannot take fall back to the reference (K % 16 is rejected at
    trace time already)."""
    if rows == 0 or n == 0 or k == 0 or g == 0:
        return False  # nothing to compute (or all zero): the reference is free
    if (n * np.dtype(out_dtype).itemsize) % 16:
        _kernels.warn_once(f"{op}: N={n} gives an output row stride TMA cannot store "
                           "(needs a multiple of 16 bytes); using the reference path")
        return False
    if rows + 256 > _INT32_MAX or g * n > _INT32_MAX or g * cdiv(n, 128) * cdiv(k, 128) > _INT32_MAX:
        _kernels.warn_once(f"{op}: rows={rows}, G*N={g * n} exceed the kernel's int32 "
                           "coordinates; using the reference path")
        return False
    return True


def _contiguous_use_kernel(a, a_s, b, b_s, group_sizes, *, out_dtype):
    (m, k), (g, n, _) = a.shape, b.shape
    return _kernel_takes("grouped_gemm", m, g, n, k, out_dtype)


def _masked_use_kernel(a, a_s, b, b_s, masked_m, *, out_dtype):
    (g, mmax, k), n = a.shape, b.shape[1]
    return _kernel_takes("grouped_gemm_masked", g * mmax, g, n, k, out_dtype)


def _rule(a, a_s, b, b_s, sizes, *, masked):
    r = _sharding.Rule()
    k, kb = r.blocked("k", a.shape[-1])
    n, nb = r.blocked("n", b.shape[1])
    r.reduce(kb)
    if masked:
        return r.build([["g", "m", k], ["g", "m", kb], ["g", n, k], ["g", nb, kb], ["g"]],
                       [["g", "m", n]])
    r.reduce("g")
    return r.build([["m", k], ["m", kb], ["g", n, k], ["g", nb, kb], [r.fixed("s")]], [["m", n]])


def _contiguous_rule(a, a_s, b, b_s, group_sizes, *, out_dtype):
    return _rule(a, a_s, b, b_s, group_sizes, masked=False)


def _contiguous_plan(layout, a, a_s, b, b_s, group_sizes, *, out_dtype):
    (m_size, k_size), (g_size, n_size, _) = a.shape, b.shape
    g = layout.first((2, 0, g_size), (3, 0, g_size))  # experts first: keep the weights local
    m = layout.take(0, 0, m_size)
    n = layout.take(2, 1, n_size, GROUP)
    k = layout.first((0, 1, k_size, GROUP), (2, 2, k_size, GROUP))
    g_local = g_size // layout.count(g)

    def local(run, a, a_s, b, b_s, sizes):
        fp32 = {"out_dtype": np.dtype(np.float32)} if k else {}
        if not g and not m:
            return reduce_k(run(a, a_s, b, b_s, sizes, **fp32), k, out_dtype)
        m_local = a.shape[0]
        clamped = reference.clamp_group_sizes(sizes, m_size)
        ends = jnp.cumsum(clamped)
        starts = ends - clamped
        r0 = _sharding.shard_index(m) * m_local
        clip = lambda v: jnp.clip(v - r0, 0, m_local)
        local_sizes = (clip(ends) - clip(starts)).astype(jnp.int32)  # rows of each group here
        if not g:
            return reduce_k(run(a, a_s, b, b_s, local_sizes, **fp32), k, out_dtype)
        # Rows of this shard's experts start at `off`: rotate them to the front, run the local
        # experts, rotate back (rows of other experts come out zero), sum over the expert axes.
        g0 = _sharding.shard_index(g) * g_local
        mine = jax.lax.dynamic_slice_in_dim(local_sizes, g0, g_local)
        off = clip(jax.lax.dynamic_index_in_dim(starts, g0, keepdims=False))
        a, a_s = jnp.roll(a, -off, axis=0), jnp.roll(a_s, -off, axis=0)
        out = jnp.roll(run(a, a_s, b, b_s, mine, **fp32), off, axis=0)
        return reduce_k(out, g + k, out_dtype)

    return Plan(in_specs=(spec(m, k), spec(m, k), spec(g, n, k), spec(g, n, k), spec(())),
                out_specs=(spec(m, n),), local=local)


def _masked_rule(a, a_s, b, b_s, masked_m, *, out_dtype):
    return _rule(a, a_s, b, b_s, masked_m, masked=True)


def _masked_plan(layout, a, a_s, b, b_s, masked_m, *, out_dtype):
    (g_size, m_size, k_size), n_size = a.shape, b.shape[1]
    g = layout.first((0, 0, g_size), (2, 0, g_size), (4, 0, g_size))
    m = layout.take(0, 1, m_size)
    n = layout.take(2, 1, n_size, GROUP)
    k = layout.first((0, 2, k_size, GROUP), (2, 2, k_size, GROUP))

    def local(run, a, a_s, b, b_s, masked_m):
        if m:  # this shard's rows [r0, r0 + Mlocal) of every group
            m_local = a.shape[1]
            r0 = _sharding.shard_index(m) * m_local
            masked_m = jnp.clip(masked_m - r0, 0, m_local).astype(jnp.int32)
        return run_reduced(run, (a, a_s, b, b_s, masked_m), k, out_dtype)

    return Plan(in_specs=(spec(g, m, k), spec(g, m, k), spec(g, n, k), spec(g, n, k), spec(g)),
                out_specs=(spec(g, m, n),), local=local)


grouped_gemm_p = _primitive.define(
    "grouped_gemm", abstract_eval=_contiguous_abstract,
    reference=lambda a, a_s, b, b_s, gs, *, out_dtype: reference.grouped_gemm(
        a, a_s, b, b_s, gs, out_dtype),
    kernel=_contiguous_kernel, use_kernel=_contiguous_use_kernel,
    batching_rule=_primitive.batch_by_loop,
    partition=_sharding.Partition(_contiguous_rule, _contiguous_plan))

grouped_gemm_masked_p = _primitive.define(
    "grouped_gemm_masked", abstract_eval=_masked_abstract,
    reference=lambda a, a_s, b, b_s, mm, *, out_dtype: reference.grouped_gemm_masked(
        a, a_s, b, b_s, mm, out_dtype),
    kernel=_masked_kernel, use_kernel=_masked_use_kernel,
    batching_rule=_primitive.batch_by_loop,
    partition=_sharding.Partition(_masked_rule, _masked_plan))


def grouped_gemm(a: jax.Array, a_s: jax.Array, b: jax.Array, b_s: jax.Array,
                 group_sizes: jax.Array, *, out_dtype=jnp.bfloat16) -> jax.Array:
    """Contiguous-layout grouped GEMM: out[r] = a[r] @ b[g(r)].T for the group g(r) owning row r.

    a [M, K] e4m3 + a_s [M, cdiv(K,128)]; b [G, N, K] e4m3 + b_s [G, cdiv(N,128), cdiv(K,128)];
    group_sizes int32 [G]. Rows past sum(group_sizes) are zero. Returns [M, N] in out_dtype.
    """
    return grouped_gemm_p.bind(a, a_s, b, b_s, group_sizes, out_dtype=np.dtype(out_dtype))


def grouped_gemm_masked(a: jax.Array, a_s: jax.Array, b: jax.Array, b_s: jax.Array,
                        masked_m: jax.Array, *, out_dtype=jnp.bfloat16) -> jax.Array:
    """Masked-layout grouped GEMM: out[g, r] = a[g, r] @ b[g].T for r < masked_m[g], else 0.

    a [G, Mmax, K] + a_s [G, Mmax, cdiv(K,128)]; b [G, N, K] + b_s; masked_m int32 [G].
    Fixed shapes, no host synchronisation. Returns [G, Mmax, N] in out_dtype.
    """
    return grouped_gemm_masked_p.bind(a, a_s, b, b_s, masked_m, out_dtype=np.dtype(out_dtype))
