"""Grouped FP8 GEMMs for mixture-of-experts.

grouped_gemm (contiguous layout, training / prefill): a [M, K] rows sorted by group, b [G, N, K],
group_sizes int32 [G] with jax.lax.ragged_dot semantics, no padding of groups.
grouped_gemm_masked (decode): a [G, Mmax, K], masked_m int32 [G]; rows >= masked_m[g] are zero.
Traced sizes are clamped (negative -> 0, past M / Mmax -> cut), never read out of bounds.
On Hopper both run the sm_90a grouped kernel (cuda/gemm/: GroupedScheduler, one launch, the
schedule derived on the device from the sizes; no host synchronisation) with a configuration
chosen here per static shape (gemm_config.pick_grouped); elsewhere the jnp reference does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from . import _checks, _kernels, _primitive, gemm_config, reference
from .gemm import check_operands, mn_major_scales
from .reference import cdiv

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


def _grouped_config(m, n, k, g, masked):
    return gemm_config.pick_grouped(m, n, k, g, _kernels.num_sms(), masked=masked)


def grouped_gemm_kernel_call(a, a_s, b, b_s, group_sizes, config: gemm_config.GemmConfig,
                             out_dtype=jnp.bfloat16):
    """The contiguous-layout FFI call with an explicit configuration."""
    out = jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), out_dtype)
    return jax.ffi.ffi_call("fp8gemm_grouped_gemm", out)(
        a, mn_major_scales(a_s), b, b_s, group_sizes, **config.attributes())


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
    config = _grouped_config(m, n, k, g, masked=False)
    return grouped_gemm_kernel_call(a, a_s, b, b_s, group_sizes, config, out_dtype)


def _masked_kernel(a, a_s, b, b_s, masked_m, *, out_dtype):
    (g, mmax, k), n = a.shape, b.shape[1]
    config = _grouped_config(mmax, n, k, g, masked=True)
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


grouped_gemm_p = _primitive.define(
    "grouped_gemm", abstract_eval=_contiguous_abstract,
    reference=lambda a, a_s, b, b_s, gs, *, out_dtype: reference.grouped_gemm(
        a, a_s, b, b_s, gs, out_dtype),
    kernel=_contiguous_kernel, use_kernel=_contiguous_use_kernel,
    batching_rule=_primitive.batch_by_loop)

grouped_gemm_masked_p = _primitive.define(
    "grouped_gemm_masked", abstract_eval=_masked_abstract,
    reference=lambda a, a_s, b, b_s, mm, *, out_dtype: reference.grouped_gemm_masked(
        a, a_s, b, b_s, mm, out_dtype),
    kernel=_masked_kernel, use_kernel=_masked_use_kernel,
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
