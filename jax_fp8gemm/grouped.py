"""Grouped FP8 GEMMs for mixture-of-experts.

grouped_gemm (contiguous layout, training / prefill): a [M, K] rows sorted by group, b [G, N, K],
group_sizes int32 [G] with jax.lax.ragged_dot semantics, no padding of groups.
grouped_gemm_masked (decode): a [G, Mmax, K], masked_m int32 [G]; rows >= masked_m[g] are zero.
Traced sizes are clamped (negative -> 0, past M / Mmax -> cut), never read out of bounds.
These run on their jnp reference until the grouped kernels land (cuda/gemm/ grouped scheduler).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from . import _checks, _primitive, reference
from .gemm import check_operands


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


grouped_gemm_p = _primitive.define(
    "grouped_gemm", abstract_eval=_contiguous_abstract,
    reference=lambda a, a_s, b, b_s, gs, *, out_dtype: reference.grouped_gemm(
        a, a_s, b, b_s, gs, out_dtype),
    batching_rule=_primitive.batch_by_loop)

grouped_gemm_masked_p = _primitive.define(
    "grouped_gemm_masked", abstract_eval=_masked_abstract,
    reference=lambda a, a_s, b, b_s, mm, *, out_dtype: reference.grouped_gemm_masked(
        a, a_s, b, b_s, mm, out_dtype),
    batching_rule=_primitive.batch_by_loop)


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
