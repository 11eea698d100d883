"""Which path (kernel or reference) the grouped / wgrad ops lower to for large static shapes.

Lowers without allocating (abstract inputs) and prints the FFI targets found in the HLO.
    python tools/diag_grouped_lowering.py
"""

import re

import jax
import jax.numpy as jnp

import jax_fp8gemm as fg

S = jax.ShapeDtypeStruct
F8, F32, I32 = jnp.float8_e4m3fn, jnp.float32, jnp.int32


def targets(fn, *args):
    text = jax.jit(fn).lower(*args).as_text()
    return sorted(set(re.findall(r"fp8gemm_\w+", text))) or ["(reference only)"]


for g, rows, n, k in [(8, 4096, 4096, 7168), (256, 1024, 4096, 7168)]:
    m = g * rows
    args = (S((m, k), F8), S((m, k // 128), F32), S((g, n, k), F8), S((g, n // 128, k // 128), F32),
            S((g,), I32))
    print(f"grouped_gemm G={g} M={m}: {targets(fg.grouped_gemm, *args)}")
t, mm, nn = 8192, 4096, 7168
wargs = (S((mm, t), F8), S((mm, t // 128), F32), S((nn, t), F8), S((nn, t // 128), F32))
print(f"gemm_wgrad {mm}x{nn}x{t}: {targets(fg.gemm_wgrad, *wargs)}")
print(f"grouped_gemm_wgrad G=8: {targets(fg.grouped_gemm_wgrad, *wargs, S((8,), I32))}")
x, w = S((8192, 8192), jnp.bfloat16), S((8192, 8192), jnp.bfloat16)
print(f"grad fp8_dot 8192^3: {targets(lambda x, w: jax.grad(lambda x, w: fg.fp8_dot(x, w).astype(F32).sum(), (0, 1))(x, w), x, w)}")
