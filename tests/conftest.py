"""Shared test helpers: fresh random data (never zeros), calc_diff, the GPU marker."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_fp8gemm as fg

jax.config.update("jax_enable_x64", False)


def calc_diff(x, y) -> float:
    """DeepGEMM's similarity measure: 1 - 2 sum(xy) / sum(x^2 + y^2), in float64."""
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    denom = np.sum(x * x + y * y)
    return float(1.0 - 2.0 * np.sum(x * y) / denom) if denom else 0.0


@pytest.fixture
def rng():
    """A fresh seed per test run: the same code must be right on any valid input."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed={seed}")
    return np.random.default_rng(seed)


def randn(rng, shape, dtype=jnp.float32, scale=1.0):
    return jnp.asarray((rng.standard_normal(shape) * scale).astype(np.float32)).astype(dtype)


def quantized(rng, a_shape, b_shape, dtype=jnp.bfloat16):
    """Random activations a_shape [..., K] and weights b_shape [..., N, K], quantized as users
    would: (a, a_s, b, b_s)."""
    a, a_s = fg.quantize_rowwise(randn(rng, a_shape, dtype))
    b, b_s = fg.quantize_blockwise(randn(rng, b_shape, dtype))
    return a, a_s, b, b_s


def f64(x):
    return np.asarray(jax.device_get(x), np.float64)


def deq_rows(x):
    """x quantized in 1x128 groups along its last axis (the reference), dequantized, float64."""
    return f64(fg.reference.dequantize_rowwise(*fg.reference.quantize_rowwise(x)))


def deq_blocks(w):
    """w quantized in 128x128 blocks (the reference), dequantized, float64."""
    return f64(fg.reference.dequantize_blockwise(*fg.reference.quantize_blockwise(w)))


def dequant64(q, s, blockwise: bool):
    f = fg.reference.dequantize_blockwise if blockwise else fg.reference.dequantize_rowwise
    return np.asarray(jax.device_get(f(q, s)), np.float64)


def grouped_reference64(a, a_s, b, b_s, sizes):
    """float64 contiguous-layout reference with the kernels' clamping: (out, rows used); rows past
    the clamped sum are 0."""
    af, bf = dequant64(a, a_s, False), dequant64(b, b_s, True)
    out = np.zeros((a.shape[0], b.shape[1]))
    start = 0
    for g, size in enumerate(np.asarray(sizes)):
        size = max(0, min(int(size), a.shape[0] - start))
        out[start:start + size] = af[start:start + size] @ bf[g].T
        start += size
    return out, start


def on_hopper() -> bool:
    return fg.kernels_enabled()


gpu = pytest.mark.skipif(not on_hopper(), reason="needs a Hopper GPU and the compiled kernels")
