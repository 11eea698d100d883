"""One way to define this package's primitives: abstract eval, a reference lowering for every
platform, an optional CUDA kernel lowering, a batching rule and a sharding rule.

The CUDA lowering decides per call (at lowering time) between the kernel and the reference, so a
non-Hopper GPU, a shape the kernel cannot take, or JAX_FP8GEMM_KERNELS=0 all get the same math.

Sharding is attached at LOWERING time. `jax.experimental.custom_partitioning` has no batching or
differentiation rules, so the primitives stay plain primitives for every transform (vmap, grad
through the custom_vjp ops, scan, remat); only when a primitive is lowered into a computation
that the SPMD partitioner will split (jit over more than one device, not inside a fully manual
shard_map) does its lowering emit a custom_partitioning call: the Shardy `sharding_rule` drives
propagation and the partition callback runs the same per-platform implementation (kernel or
reference, chosen per shard from the local shapes) on each shard, with a `psum` over a sharded
contraction. jax 0.11.2 supports this nesting (checked: `mlir.lower_fun` of a custom_partitioning
function inside a primitive's lowering rule), provided the primitive is registered in
`dispatch.prim_requires_devices_during_lowering`, so that jit passes the device assignment the
custom_partitioning lowering needs. On one device and inside a fully manual shard_map the
implementation is lowered directly (there is nothing to partition), and so it is for jax.export
(custom_partitioning's Python callbacks cannot be serialized; the exported module is partitioned
as ordinary ops). Inside a partially manual shard_map it is lowered directly too, and the partitioner
treats it as ordinary ops (the reference partitions; a kernel call is replicated).

The abstract eval also types the results for shard_map and Explicit meshes: results vary over the
union of the operands' varying manual axes (so shard_map's check_vma sees them), and on a mesh
with Explicit axes their shardings come from the op's plan.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax._src import core, dispatch, sharding_impls
from jax._src import mesh as mesh_lib
from jax._src.interpreters import mlir as mlir_internal
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir
from jax.sharding import NamedSharding, PartitionSpec as P

from . import _kernels, _sharding


def define(name: str, *, abstract_eval: Callable, reference: Callable,
           kernel: Callable | None = None, use_kernel: Callable | None = None,
           batching_rule: Callable, multiple_results: bool = False,
           partition: _sharding.Partition | None = None) -> Primitive:
    """Builds the primitive `fp8gemm_<name>`.

    reference(*args, **params) and kernel(*args, **params) are jnp-level functions (the kernel one
    calls jax.ffi.ffi_call); use_kernel(*avals, **params) -> bool may veto the kernel for a shape.
    batching_rule(prim, args, dims, **params) -> (out, out_dims).
    partition: the op's sharding rule (_sharding.Partition); without one the op is lowered as is
    and the partitioner treats its implementation as ordinary ops.
    """
    prim = Primitive(f"fp8gemm_{name}")
    prim.multiple_results = multiple_results
    prim.def_impl(lambda *args, **params: dispatch.apply_primitive(prim, *args, **params))
    prim.def_abstract_eval(_typed(abstract_eval, partition, multiple_results))

    def reference_impl(*args, **params):
        return reference(*args, **params)

    mlir.register_lowering(prim, _lowering(reference_impl, partition, multiple_results))
    if kernel is not None:
        def cuda_impl(*args, **params):
            # Decided on the shapes this call sees: per shard when the op is partitioned.
            avals = [jax.typeof(x) for x in args]
            if not _kernels.kernels_enabled():
                return reference(*args, **params)
            if not all(core.is_constant_shape(a.shape) for a in avals):
                # Shape-polymorphic export: the kernels' configurations are per static shape.
                _kernels.warn_once(f"{prim.name}: symbolic shapes lower to the jnp reference")
                return reference(*args, **params)
            if use_kernel is None or use_kernel(*avals, **params):
                return kernel(*args, **params)
            return reference(*args, **params)

        mlir.register_lowering(prim, _lowering(cuda_impl, partition, multiple_results),
                               platform="cuda")
    if partition is not None:
        dispatch.prim_requires_devices_during_lowering.add(prim)

    batching.primitive_batchers[prim] = lambda args, dims, **params: batching_rule(
        prim, args, dims, **params)
    return prim


def _partitionable(ctx) -> bool:
    """True when this lowering goes to the SPMD partitioner with a known mesh (see the module doc)."""
    axis_context = ctx.module_context.axis_context
    if ctx.module_context.lowering_parameters.for_export:
        return False  # jax.export cannot serialize custom_partitioning's callbacks
    return (isinstance(axis_context, sharding_impls.ShardingContext)
            and axis_context.device_assignment is not None
            and len(axis_context.device_assignment) > 1
            and axis_context.abstract_mesh is not None)


def _lowering(impl: Callable, partition, multiple_results: bool):
    def lowering(ctx, *args, **params):
        if partition is None or not _partitionable(ctx):
            def fun(*xs):
                out = impl(*xs, **params)
                return tuple(out) if multiple_results else (out,)
        else:
            fun = _custom_partitioned(impl, partition, multiple_results, ctx.avals_in, params)
        if not _explicit(ctx.avals_in):
            return mlir.lower_fun(fun, multiple_results=True)(ctx, *args)
        # Explicit mesh: the implementation is traced untyped (as under auto sharding; jnp code
        # such as the reference's reshapes would otherwise need out_sharding= everywhere), and
        # the results are pinned to the shardings their types carry.
        untyped = ctx.replace(avals_in=[_untyped(a) for a in ctx.avals_in],
                              avals_out=[_untyped(a) for a in ctx.avals_out])
        with mesh_lib.use_abstract_mesh(mesh_lib.empty_abstract_mesh):
            outs = mlir.lower_fun(fun, multiple_results=True)(untyped, *args)
        return [mlir_internal.lower_with_sharding_in_types(ctx, o, a)
                for o, a in zip(outs, ctx.avals_out)]
    return lowering


def _explicit(avals) -> bool:
    return any(getattr(a.sharding.mesh, "_any_axis_explicit", False) for a in avals)


def _untyped(aval):
    return core.ShapedArray(aval.shape, aval.dtype, aval.weak_type)


def _custom_partitioned(impl, partition: _sharding.Partition, multiple_results, avals, params):
    """impl(*args, **params) wrapped in custom_partitioning with the op's rule and plan."""
    rule, rule_kwargs = partition.rule(*avals, **params)

    def body(*args):
        out = impl(*args, **params)
        return tuple(out) if multiple_results else (out,)

    def partition_fn(mesh, arg_shapes, result_shape):
        arg_specs = [_sharding.spec_of(s.sharding, len(s.shape), mesh) for s in arg_shapes]
        out_specs = [_sharding.spec_of(s.sharding, len(s.shape), mesh) for s in result_shape]
        plan = partition.plan(_sharding.Layout(mesh.shape, arg_specs, out_specs), *avals, **params)

        def lower_fn(*blocks):
            run = lambda *xs, **over: impl(*xs, **{**params, **over})
            # The blocks are untyped: keep the body untyped even when this runs under an
            # Explicit mesh context (the partitioner calls back during compilation).
            with mesh_lib.use_abstract_mesh(mesh_lib.empty_abstract_mesh):
                out = plan.local(run, *blocks)
            return tuple(out) if multiple_results else (out,)

        named = lambda s: NamedSharding(mesh, s)
        return (mesh, lower_fn, tuple(named(s) for s in plan.out_specs),
                tuple(named(s) for s in plan.in_specs))

    fun = custom_partitioning(body)
    fun.def_partition(partition_fn, sharding_rule=rule, decode_shardings=False, **rule_kwargs)
    return fun


def _typed(abstract_eval: Callable, partition, multiple_results: bool):
    """abstract_eval, with results typed for manual and Explicit meshes (see the module doc)."""
    def rule(*avals, **params):
        out = abstract_eval(*avals, **params)
        outs = list(out) if multiple_results else [out]
        mesh = next((a.sharding.mesh for a in avals if not a.sharding.mesh.empty), None)
        if mesh is None:
            return out
        varying = frozenset().union(*(a.mat.varying for a in avals))
        specs = [P()] * len(outs)
        explicit = [n for n, t in zip(mesh.axis_names, mesh.axis_types)
                    if t == jax.sharding.AxisType.Explicit]
        if partition is not None and explicit:
            operands = [_sharding.spec_of(a.sharding, a.ndim) for a in avals]
            layout = _sharding.Layout({n: mesh.shape[n] for n in explicit}, operands, None)
            specs = partition.plan(layout, *avals, **params).out_specs
        outs = [o.update(sharding=NamedSharding(mesh, s),
                         manual_axis_type=core.ManualAxisType(varying=varying))
                for o, s in zip(outs, specs)]
        return tuple(outs) if multiple_results else outs[0]
    return rule


def batch_size(args, dims) -> int:
    return next(a.shape[d] for a, d in zip(args, dims) if d is not None)


def at_front(x, dim, size):
    """Moves the batch axis to the front, broadcasting an unbatched operand."""
    if dim is None:
        return jnp.broadcast_to(x, (size, *x.shape))
    return jnp.moveaxis(x, dim, 0)


def batch_leading_axes(prim, args, dims, **params):
    """For ops that already take any leading axes: put the batch axis in front and bind once."""
    size = batch_size(args, dims)
    out = prim.bind(*[at_front(a, d, size) for a, d in zip(args, dims)], **params)
    return out, ((0,) * len(out) if prim.multiple_results else 0)


def batch_by_loop(prim, args, dims, **params):
    """Correct for any op: one call per batch element (lax.map), unbatched operands closed over."""
    mapped = [i for i, d in enumerate(dims) if d is not None]
    xs = [jnp.moveaxis(args[i], dims[i], 0) for i in mapped]

    def one(slices):
        full = list(args)
        for i, s in zip(mapped, slices):
            full[i] = s
        return prim.bind(*full, **params)

    out = jax.lax.map(one, xs)
    return out, ((0,) * len(out) if prim.multiple_results else 0)
