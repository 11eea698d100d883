"""One way to define this package's primitives: abstract eval, a reference lowering for every
platform, an optional CUDA kernel lowering, and a batching rule.

The CUDA lowering decides per call (at lowering time) between the kernel and the reference, so a
non-Hopper GPU, a shape the kernel cannot take, or JAX_FP8GEMM_KERNELS=0 all get the same math.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax._src import dispatch
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from . import _kernels


def define(name: str, *, abstract_eval: Callable, reference: Callable,
           kernel: Callable | None = None, use_kernel: Callable | None = None,
           batching_rule: Callable, multiple_results: bool = False) -> Primitive:
    """Builds the primitive `fp8gemm_<name>`.

    reference(*args, **params) and kernel(*args, **params) are jnp-level functions (the kernel one
    calls jax.ffi.ffi_call); use_kernel(*avals, **params) -> bool may veto the kernel for a shape.
    batching_rule(prim, args, dims, **params) -> (out, out_dims).
    """
    prim = Primitive(f"fp8gemm_{name}")
    prim.multiple_results = multiple_results
    prim.def_impl(lambda *args, **params: dispatch.apply_primitive(prim, *args, **params))
    prim.def_abstract_eval(abstract_eval)

    reference_lowering = mlir.lower_fun(reference, multiple_results=multiple_results)
    mlir.register_lowering(prim, reference_lowering)
    if kernel is not None:
        kernel_lowering = mlir.lower_fun(kernel, multiple_results=multiple_results)

        def cuda_lowering(ctx, *args, **params):
            if _kernels.kernels_enabled() and (use_kernel is None or use_kernel(*ctx.avals_in, **params)):
                return kernel_lowering(ctx, *args, **params)
            return reference_lowering(ctx, *args, **params)

        mlir.register_lowering(prim, cuda_lowering, platform="cuda")

    batching.primitive_batchers[prim] = lambda args, dims, **params: batching_rule(
        prim, args, dims, **params)
    return prim


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
