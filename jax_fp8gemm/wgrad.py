"""Weight-gradient GEMMs: both operands quantized 1x128 along the token axis (the contracted one),
FP32 accumulation, FP32 or bf16 output (bf16 for a bf16 parameter's gradient: the kernel rounds its
FP32 accumulator once, as a separate convert would, without the FP32 round trip through memory). `gemm_wgrad` for dense layers, `grouped_gemm_wgrad` (k-grouped: one contraction per
group of consecutive tokens) for ragged_dot's weight gradient. On Hopper both run the sm_90a wgrad
kernels (cuda/gemm/fp8_gemm_wgrad.cuh: per-row B scales; the k-grouped one takes
the unpadded group sizes and masks the other group's tokens of a shared 128-token block in shared
memory); elsewhere the jnp reference does.

Sharding (rules next to each primitive): M and N shard freely (their scales are per row); the
token axis T is contracted, shards at a multiple of 128 tokens per shard (whole scale groups), and
its per-shard FP32 partial products are `psum`med. The k-grouped op's output shards along G too:
each shard computes only its own groups' tokens, at most 127 extra tokens (see _grouped_plan).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from . import _checks, _kernels, _primitive, _sharding, gemm_config, reference
from ._sharding import Plan, spec
from .gemm import mn_major_scales, reduce_k, run_reduced
from .reference import GROUP

_INT32_MAX = 2**31 - 1


def _operands(op, a, a_s, b, b_s):
    _checks.fp8(op, "a", a)
    _checks.fp8(op, "b", b)
    _checks.rank(op, "a", a, 2, "[M, T]")
    _checks.rank(op, "b", b, 2, "[N, T]")
    _checks.same(op, "T (token axis, last)", "a", a.shape[1], "b", b.shape[1])
    _checks.k_multiple_of_16(op, a.shape[1])
    _checks.scales(op, "a_s", a_s, _checks.rowwise_scale_shape(a.shape))
    _checks.scales(op, "b_s", b_s, _checks.rowwise_scale_shape(b.shape))


def _dense_abstract(a, a_s, b, b_s, *, out_dtype):
    _operands("gemm_wgrad", a, a_s, b, b_s)
    return ShapedArray((a.shape[0], b.shape[0]), _checks.out_dtype("gemm_wgrad", out_dtype))


def _grouped_abstract(a, a_s, b, b_s, group_sizes, *, out_dtype):
    op = "grouped_gemm_wgrad"
    _operands(op, a, a_s, b, b_s)
    _checks.dtype_in(op, "group_sizes", group_sizes, (jnp.int32,))
    _checks.rank(op, "group_sizes", group_sizes, 1, "[G]")
    return ShapedArray((group_sizes.shape[0], a.shape[0], b.shape[0]),
                       _checks.out_dtype(op, out_dtype))


def _operand_factors(r, t_size):
    t, tb = r.blocked("t", t_size)
    r.reduce(tb)
    return [["m", t], ["m", tb], ["n", t], ["n", tb]]


def _dense_rule(a, a_s, b, b_s, *, out_dtype):
    r = _sharding.Rule()
    return r.build(_operand_factors(r, a.shape[1]), [["m", "n"]])


def _take_mnt(layout, a, b):
    m = layout.first((0, 0, a.shape[0]), (1, 0, a.shape[0]))
    n = layout.first((2, 0, b.shape[0]), (3, 0, b.shape[0]))
    t = layout.first((0, 1, a.shape[1], GROUP), (2, 1, a.shape[1], GROUP))
    return m, n, t


def _dense_plan(layout, a, a_s, b, b_s, *, out_dtype):
    m, n, t = _take_mnt(layout, a, b)

    def local(run, a, a_s, b, b_s):
        return run_reduced(run, (a, a_s, b, b_s), t, out_dtype)

    return Plan(in_specs=(spec(m, t), spec(m, t), spec(n, t), spec(n, t)),
                out_specs=(spec(m, n),), local=local)


def _split_bf16(s):
    """s (f32) -> (hi, lo) bf16 with hi + lo = s to ~2^-17: hi = bf16(s) (to nearest, ties to
    even), lo = bf16(s - hi). (For s >= 2^-110; below, lo may be flushed to zero, 2^-9. FLT_MIN,
    the scale of an all-zero group, is exact.)

    hi is rounded with integer operations on purpose. Written as bf16(s) read back as f32, XLA on
    GPU may drop the f32 -> bf16 -> f32 round trip inside a fusion (xla_allow_excess_precision), and
    then lo = s - s = 0: the 256x96 tile's scale products had bf16 precision only (calc_diff 5.4e-6
    against float64, the other tiles 8e-9; RESULTS.md, session 47)."""
    s = s.astype(jnp.float32)
    bits = jax.lax.bitcast_convert_type(s, jnp.uint32)
    hi_bits = (bits + jnp.uint32(0x7FFF) + ((bits >> 16) & jnp.uint32(1))) & jnp.uint32(0xFFFF0000)
    hi = jax.lax.bitcast_convert_type(hi_bits, jnp.float32)
    return hi.astype(jnp.bfloat16), (s - hi).astype(jnp.bfloat16)


def scale_operand_b(b_s):
    """B's scale operand of the 256x96 wgrad tiles (dense and k-grouped: their scale products on
    the tensor cores, GemmTraits::kScaleMma): [N, Kb] scales s -> bf16 [Kb, N, 8] =
    (hi, hi, lo, lo, 0, 0, 0, 0) of `_split_bf16(s)`. One small fused XLA kernel."""
    hi, lo = _split_bf16(b_s.T)
    zero = jnp.zeros_like(hi)
    return jnp.stack([hi, hi, lo, lo, zero, zero, zero, zero], axis=-1)


def scale_operand_a(a_s):
    """A's scale operand of the 256x96 wgrad tiles: [M, Kb] scales s -> uint32 [Kb, align(M, 4)] (the
    layout of `mn_major_scales`), the word hi | lo << 16 of `_split_bf16(s)`; the kernel hands it to
    its bf16 wgmma as it is."""
    bits = lambda v: jax.lax.bitcast_convert_type(v, jnp.uint16).astype(jnp.uint32)
    hi, lo = _split_bf16(a_s)
    return mn_major_scales(bits(hi) | (bits(lo) << 16))


def _scale_operands_for(config: gemm_config.GemmConfig, a_s, b_s):
    """What the kernel of `config` takes as its scale operands: (scale_operand_a(a_s),
    scale_operand_b(b_s)), or two empty arrays."""
    if gemm_config.takes_scale_operand(config):
        return scale_operand_a(a_s), scale_operand_b(b_s)
    return jnp.zeros((0, 0), jnp.uint32), jnp.zeros((0, 0, 8), jnp.bfloat16)


def gemm_wgrad_kernel_call(a, a_s, b, b_s, config: gemm_config.GemmConfig, out_dtype=jnp.float32):
    """The dense wgrad FFI call with an explicit configuration: [M, N], FP32 or bf16."""
    out = jax.ShapeDtypeStruct((a.shape[0], b.shape[0]), out_dtype)
    return jax.ffi.ffi_call("fp8gemm_gemm_wgrad", out)(
        a, mn_major_scales(a_s), b, mn_major_scales(b_s), *_scale_operands_for(config, a_s, b_s),
        **config.attributes())


def _kernel_dtype(out_dtype, n):
    """What the kernel writes: bf16 when that is the output (and a bf16 row is a multiple of 16
    bytes, for the TMA store), else FP32 (converted afterwards, e.g. to float16)."""
    return jnp.bfloat16 if out_dtype == jnp.bfloat16 and n % 8 == 0 else jnp.float32


def _kernel_takes(op, m, n, t, g=1) -> bool:
    """Shapes the wgrad kernels cannot take fall back to the reference (T % 16 is rejected at
    trace time already)."""
    if m == 0 or n == 0 or t == 0 or g == 0:
        return False  # nothing to compute (or all zero): the reference is free
    if n % 4:
        _kernels.warn_once(f"{op}: N={n} gives an FP32 output row stride TMA cannot store "
                           "(needs a multiple of 16 bytes); using the reference path")
        return False
    if g * m + 256 > _INT32_MAX or t > _INT32_MAX:
        _kernels.warn_once(f"{op}: G*M={g * m}, T={t} exceed the kernel's int32 coordinates; "
                           "using the reference path")
        return False
    return True


def _dense_kernel(a, a_s, b, b_s, *, out_dtype):
    (m, t), n = a.shape, b.shape[0]
    kernel_dtype = _kernel_dtype(out_dtype, n)
    config = gemm_config.pick_wgrad(m, n, t, _kernels.num_sms(), out_dtype=kernel_dtype)
    return gemm_wgrad_kernel_call(a, a_s, b, b_s, config, kernel_dtype).astype(out_dtype)


def _dense_use_kernel(a, a_s, b, b_s, *, out_dtype):
    (m, t), n = a.shape, b.shape[0]
    return _kernel_takes("gemm_wgrad", m, n, t)


gemm_wgrad_p = _primitive.define(
    "gemm_wgrad", abstract_eval=_dense_abstract,
    reference=lambda a, a_s, b, b_s, *, out_dtype: reference.gemm_wgrad(a, a_s, b, b_s, out_dtype),
    kernel=_dense_kernel, use_kernel=_dense_use_kernel,
    batching_rule=_primitive.batch_by_loop, partition=_sharding.Partition(_dense_rule, _dense_plan))


def _grouped_rule(a, a_s, b, b_s, group_sizes, *, out_dtype):
    r = _sharding.Rule()
    return r.build(_operand_factors(r, a.shape[1]) + [[r.fixed("s")]], [["g", "m", "n"]])


def _grouped_plan(layout, a, a_s, b, b_s, group_sizes, *, out_dtype):
    """Output [G, M, N] may shard along G (when the result is wanted so, e.g. the gradient of
    expert-sharded weights). A shard owning groups [g0, g0 + Gl) starts its tokens at
    S = start of group g0 (in its own token window, when T shards too). The operands are rotated
    along T by S rounded down to whole 128-token scale groups, and one leading group covers the
    < 128 tokens before S; its output is dropped. group_sizes stays replicated (it is [G] int32)."""
    g_total = group_sizes.shape[0]
    g = layout.take_result(0, 0, g_total)
    m, n, t = _take_mnt(layout, a, b)
    t_total = a.shape[1]
    g_local = g_total // layout.count(g)

    def local(run, a, a_s, b, b_s, sizes):
        t_local = a.shape[1]
        if not g and not t:
            return run(a, a_s, b, b_s, sizes)
        ends = jnp.cumsum(reference.clamp_group_sizes(sizes, t_total))
        starts = ends - reference.clamp_group_sizes(sizes, t_total)
        t0 = _sharding.shard_index(t) * t_local
        clip = lambda v: jnp.clip(v - t0, 0, t_local)
        local_sizes = clip(ends) - clip(starts)  # this shard's tokens of every group
        fp32 = {"out_dtype": np.dtype(np.float32)} if t else {}
        if not g:
            out = run(a, a_s, b, b_s, local_sizes.astype(jnp.int32), **fp32)
            return reduce_k(out, t, out_dtype)
        g0 = _sharding.shard_index(g) * g_local
        mine = jax.lax.dynamic_slice_in_dim(local_sizes, g0, g_local)
        first = clip(jax.lax.dynamic_index_in_dim(starts, g0, keepdims=False))
        shift = (first // GROUP) * GROUP
        a, b = (jnp.roll(v, -shift, axis=1) for v in (a, b))
        a_s, b_s = (jnp.roll(v, -(shift // GROUP), axis=1) for v in (a_s, b_s))
        sizes_ext = jnp.concatenate([(first - shift)[None], mine]).astype(jnp.int32)
        out = run(a, a_s, b, b_s, sizes_ext, **fp32)[1:]
        return reduce_k(out, t, out_dtype)

    return Plan(in_specs=(spec(m, t), spec(m, t), spec(n, t), spec(n, t), spec(())),
                out_specs=(spec(g, m, n),), local=local)


def grouped_gemm_wgrad_kernel_call(a, a_s, b, b_s, group_sizes, config: gemm_config.GemmConfig,
                                   out_dtype=jnp.float32):
    """The k-grouped wgrad FFI call with an explicit configuration: [G, M, N], FP32 or bf16. The kernel
    takes the tokens as they are (unpadded group sizes; a 128-token block shared by two groups
    is masked per group in shared memory)."""
    out = jax.ShapeDtypeStruct((group_sizes.shape[0], a.shape[0], b.shape[0]), out_dtype)
    return jax.ffi.ffi_call("fp8gemm_grouped_gemm_wgrad", out)(
        a, mn_major_scales(a_s), b, mn_major_scales(b_s), *_scale_operands_for(config, a_s, b_s),
        group_sizes, **config.attributes())


def _grouped_kernel(a, a_s, b, b_s, group_sizes, *, out_dtype):
    (m, t), n, g = a.shape, b.shape[0], group_sizes.shape[0]
    kernel_dtype = _kernel_dtype(out_dtype, n)
    config = gemm_config.pick_wgrad(m, n, t, _kernels.num_sms(), g=g, k_grouped=True, out_dtype=kernel_dtype)
    return grouped_gemm_wgrad_kernel_call(a, a_s, b, b_s, group_sizes, config, kernel_dtype).astype(out_dtype)


def _grouped_use_kernel(a, a_s, b, b_s, group_sizes, *, out_dtype):
    (m, t), n, g = a.shape, b.shape[0], group_sizes.shape[0]
    return _kernel_takes("grouped_gemm_wgrad", m, n, t, g)


grouped_gemm_wgrad_p = _primitive.define(
    "grouped_gemm_wgrad", abstract_eval=_grouped_abstract,
    reference=lambda a, a_s, b, b_s, gs, *, out_dtype: reference.grouped_gemm_wgrad(
        a, a_s, b, b_s, gs, out_dtype),
    kernel=_grouped_kernel, use_kernel=_grouped_use_kernel,
    batching_rule=_primitive.batch_by_loop,
    partition=_sharding.Partition(_grouped_rule, _grouped_plan))


def gemm_wgrad(a: jax.Array, a_s: jax.Array, b: jax.Array, b_s: jax.Array, *,
               out_dtype=jnp.float32) -> jax.Array:
    """a [M, T] e4m3, b [N, T] e4m3, both with 1x128 scales along T -> [M, N] = a @ b.T, accumulated
    in FP32; out_dtype float32 (default), bfloat16 (rounded once by the kernel) or float16."""
    return gemm_wgrad_p.bind(a, a_s, b, b_s, out_dtype=np.dtype(out_dtype))


def grouped_gemm_wgrad(a: jax.Array, a_s: jax.Array, b: jax.Array, b_s: jax.Array,
                       group_sizes: jax.Array, *, out_dtype=jnp.float32) -> jax.Array:
    """k-grouped: out[g] = a[:, T_g] @ b[:, T_g].T over group g's consecutive tokens -> [G, M, N]
    (out_dtype as for gemm_wgrad)."""
    return grouped_gemm_wgrad_p.bind(a, a_s, b, b_s, group_sizes, out_dtype=np.dtype(out_dtype))
