"""Trace-time argument checks: every message names the op, the argument and what was expected."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .reference import FP8, GROUP, cdiv

FLOAT_INPUTS = (jnp.float32, jnp.bfloat16, jnp.float16)
OUT_DTYPES = (jnp.bfloat16, jnp.float32)


def _names(dtypes) -> str:
    return ", ".join(np.dtype(d).name for d in dtypes)


def dtype_in(op: str, name: str, aval, allowed) -> None:
    if np.dtype(aval.dtype) not in [np.dtype(d) for d in allowed]:
        raise TypeError(f"{op}: {name} must have dtype {_names(allowed)}, got {aval.dtype}")


def fp8(op: str, name: str, aval) -> None:
    dtype_in(op, name, aval, (FP8,))


def scales(op: str, name: str, aval, expected_shape) -> None:
    dtype_in(op, name, aval, (jnp.float32,))
    shape(op, name, aval, expected_shape)


def shape(op: str, name: str, aval, expected) -> None:
    if tuple(aval.shape) != tuple(expected):
        raise ValueError(f"{op}: {name} must have shape {tuple(expected)}, got {tuple(aval.shape)}")


def rank(op: str, name: str, aval, expected: int, layout: str, at_least: bool = False) -> None:
    ok = aval.ndim >= expected if at_least else aval.ndim == expected
    if not ok:
        want = f"rank >= {expected}" if at_least else f"rank {expected}"
        raise ValueError(f"{op}: {name} must be {layout} ({want}), got shape {tuple(aval.shape)}")


def same(op: str, what: str, a_name: str, a_val: int, b_name: str, b_val: int) -> None:
    if a_val != b_val:
        raise ValueError(f"{op}: {what} of {a_name} ({a_val}) and {b_name} ({b_val}) must match")


def k_multiple_of_16(op: str, k: int) -> None:
    # TMA needs 16-byte row strides and WGMMA consumes K in steps of 32 bytes; one rule everywhere.
    if k % 16 != 0:
        raise ValueError(f"{op}: K (the contracted axis, {k}) must be a multiple of 16 (quantize both "
                         f"operands with align=128 to have them zero-padded: whole 128-byte rows are "
                         f"also the fastest)")


def out_dtype(op: str, dtype):
    if np.dtype(dtype) not in [np.dtype(d) for d in OUT_DTYPES]:
        raise TypeError(f"{op}: out_dtype must be one of {_names(OUT_DTYPES)}, got {dtype}")
    return np.dtype(dtype)


def int32_vector(op: str, name: str, aval, length: int) -> None:
    dtype_in(op, name, aval, (jnp.int32,))
    shape(op, name, aval, (length,))


def rowwise_scale_shape(x_shape) -> tuple[int, ...]:
    return (*x_shape[:-1], cdiv(x_shape[-1], GROUP))


def blockwise_scale_shape(w_shape) -> tuple[int, ...]:
    return (*w_shape[:-2], cdiv(w_shape[-2], GROUP), cdiv(w_shape[-1], GROUP))
