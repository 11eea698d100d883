"""Dense FP8 GEMM: out[M, N] = (a * a_s) @ (b * b_s)^T, FP32 accumulation.

a [M, K] e4m3 with 1x128 scales a_s [M, cdiv(K,128)]; b [N, K] e4m3 with 128x128 scales
b_s [cdiv(N,128), cdiv(K,128)]. On Hopper the sm_90a kernel (cuda/gemm/) runs with a configuration
chosen here per static shape (gemm_config.py); elsewhere the jnp reference does.

Sharding (the rule sits with the primitive below): M of `a` and N of `b` shard with no
communication; a sharded K is computed per shard in FP32 and `psum`med, then cast to out_dtype.
The scales follow their operands: a_s [M, Kb] shards like a; b_s [Nb, Kb] like b. N and K shard
only at a multiple of 128 per shard (whole scale blocks); otherwise they are replicated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from . import _checks, _kernels, _primitive, _sharding, gemm_config, reference
from ._sharding import Plan, spec
from .reference import GROUP, cdiv

_OP = "gemm"


def check_operands(op, a, a_s, b, b_s, *, a_layout, b_rank):
    """Shared by gemm and the grouped ops: dtypes, ranks, K, scale shapes. Returns K."""
    _checks.fp8(op, "a", a)
    _checks.fp8(op, "b", b)
    _checks.rank(op, "b", b, b_rank, "[N, K]" if b_rank == 2 else "[G, N, K]")
    k = a.shape[-1]
    _checks.same(op, "K (last axis)", "a", k, "b", b.shape[-1])
    _checks.k_multiple_of_16(op, k)
    _checks.scales(op, "a_s", a_s, _checks.rowwise_scale_shape(a.shape))
    _checks.scales(op, "b_s", b_s, _checks.blockwise_scale_shape(b.shape))
    return k


def _abstract(a, a_s, b, b_s, *, out_dtype):
    _checks.rank(_OP, "a", a, 2, "[M, K]")
    check_operands(_OP, a, a_s, b, b_s, a_layout="[M, K]", b_rank=2)
    return ShapedArray((a.shape[0], b.shape[0]), _checks.out_dtype(_OP, out_dtype))


def mn_major_scales(a_s: jax.Array) -> jax.Array:
    """[M, Kb] row-wise scales -> [Kb, align(M, 4)]: the layout the kernel's TMA loads."""
    m = a_s.shape[0]
    return jnp.pad(a_s.T, ((0, 0), (0, -m % 4)))


def gemm_kernel_call(a, a_s, b, b_s, config: gemm_config.GemmConfig, out_dtype=jnp.bfloat16):
    """The FFI call with an explicit configuration (the benchmark's config sweep uses this).
    A's scales go MN-major, unpadded for the decode (64-row) tiles and the CUDA-core GEMM (M <= 4),
    whose launchers read them flat
    when M % 4 != 0: no pad kernel runs before a decode GEMM (M = 1: ~1.2 us of ~10;
    cuda/gemm/fp8_gemm.cu, launch_fp8_gemm)."""
    m = a.shape[0]
    sfa = a_s.T if config.block_m <= 64 else mn_major_scales(a_s)
    out = jax.ShapeDtypeStruct((m, b.shape[0]), out_dtype)
    return jax.ffi.ffi_call("fp8gemm_gemm", out)(a, sfa, b, b_s, **config.attributes(),
                                                  k_splits=config.k_splits)


def _kernel(a, a_s, b, b_s, *, out_dtype):
    (m, k), n = a.shape, b.shape[0]
    config = gemm_config.pick(m, n, k, out_dtype, _kernels.num_sms(), _kernels.max_active_split_k_clusters)
    return gemm_kernel_call(a, a_s, b, b_s, config, out_dtype)


def _use_kernel(a, a_s, b, b_s, *, out_dtype):
    (m, k), n = a.shape, b.shape[0]
    if m == 0 or n == 0 or k == 0:
        return False
    if (n * np.dtype(out_dtype).itemsize) % 16:
        _kernels.warn_once(f"gemm: N={n} gives an output row stride TMA cannot store "
                           "(needs a multiple of 16 bytes); using the reference path")
        return False
    return True


def _batch(prim, args, dims, *, out_dtype):
    a, a_s, b, b_s = args
    da, das, db, dbs = dims
    if db is None and dbs is None:  # batch of activations against one weight: fold into M
        size = _primitive.batch_size(args, dims)
        a = _primitive.at_front(a, da, size)
        a_s = _primitive.at_front(a_s, das, size)
        out = prim.bind(a.reshape(-1, a.shape[-1]), a_s.reshape(-1, a_s.shape[-1]), b, b_s,
                        out_dtype=out_dtype)
        return out.reshape(size, a.shape[1], b.shape[0]), 0
    # A batch of weights is the masked grouped GEMM with every row valid.
    from .grouped import grouped_gemm_masked
    size = _primitive.batch_size(args, dims)
    a, a_s, b, b_s = (_primitive.at_front(x, d, size) for x, d in zip(args, dims))
    masked_m = jnp.full((size,), a.shape[1], jnp.int32)
    return grouped_gemm_masked(a, a_s, b, b_s, masked_m, out_dtype=out_dtype), 0


def reduce_k(out, k_axes, out_dtype):
    """Sum per-shard FP32 partial products over the mesh axes that shard K (shared by the
    grouped ops)."""
    if not k_axes:
        return out
    return jax.lax.psum(out, k_axes).astype(out_dtype)


def run_reduced(run, args, k_axes, out_dtype):
    """run(*args) on this shard; with K sharded over k_axes, in FP32 and summed (reduce_k)."""
    if not k_axes:
        return run(*args)
    return reduce_k(run(*args, out_dtype=np.dtype(np.float32)), k_axes, out_dtype)


def _rule(a, a_s, b, b_s, *, out_dtype):
    r = _sharding.Rule()
    k, kb = r.blocked("k", a.shape[1])
    n, nb = r.blocked("n", b.shape[0])
    r.reduce(kb)
    return r.build([["m", k], ["m", kb], [n, k], [nb, kb]], [["m", n]])


def _plan(layout, a, a_s, b, b_s, *, out_dtype):
    (m_size, k_size), n_size = a.shape, b.shape[0]
    m = layout.take(0, 0, m_size)
    n = layout.take(2, 0, n_size, GROUP)
    k = layout.first((0, 1, k_size, GROUP), (2, 1, k_size, GROUP))

    def local(run, a, a_s, b, b_s):
        return run_reduced(run, (a, a_s, b, b_s), k, out_dtype)

    return Plan(in_specs=(spec(m, k), spec(m, k), spec(n, k), spec(n, k)),
                out_specs=(spec(m, n),), local=local)


gemm_p = _primitive.define(
    _OP, abstract_eval=_abstract,
    reference=lambda a, a_s, b, b_s, *, out_dtype: reference.gemm(a, a_s, b, b_s, out_dtype),
    kernel=_kernel, use_kernel=_use_kernel, batching_rule=_batch,
    partition=_sharding.Partition(_rule, _plan))


def gemm(a: jax.Array, a_s: jax.Array, b: jax.Array, b_s: jax.Array, *,
         out_dtype=jnp.bfloat16) -> jax.Array:
    """a [..., M, K] e4m3 (scales [..., M, cdiv(K,128)]) x b [N, K] e4m3 (scales
    [cdiv(N,128), cdiv(K,128)]) -> [..., M, N] in out_dtype (bfloat16 or float32): a @ b.T.

    Leading axes of a fold into M (one kernel launch).
    """
    a, a_s = jnp.asarray(a), jnp.asarray(a_s)
    if a.ndim > 2:
        _checks.scales(_OP, "a_s", a_s, _checks.rowwise_scale_shape(a.shape))
        lead = a.shape[:-2]
        out = gemm_p.bind(a.reshape(-1, a.shape[-1]), a_s.reshape(-1, a_s.shape[-1]), b, b_s,
                          out_dtype=np.dtype(out_dtype))
        return out.reshape(*lead, a.shape[-2], out.shape[-1])
    return gemm_p.bind(a, a_s, b, b_s, out_dtype=np.dtype(out_dtype))
