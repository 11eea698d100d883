"""Quantize activations and weights, run the FP8 GEMM, check it, time it.

    python examples/quickstart.py [--m 4096 --n 7168 --k 16384]

On a Hopper GPU with the compiled extension this runs the sm_90a kernels; anywhere else it says
so and runs the jnp reference path (smaller default shape on CPU).
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import jax_fp8gemm as fg


def calc_diff(x, y):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return 1.0 - 2.0 * np.sum(x * y) / np.sum(x * x + y * y)


def main():
    kernels = fg.kernels_enabled()
    default = (4096, 7168, 16384) if kernels else (512, 1024, 2048)
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--m", type=int, default=default[0])
    p.add_argument("--n", type=int, default=default[1])
    p.add_argument("--k", type=int, default=default[2])
    args = p.parse_args()
    m, n, k = args.m, args.n, args.k

    print(f"backend: {jax.default_backend()}, devices: {jax.devices()}")
    if kernels:
        print("path: sm_90a CUDA kernels (Hopper)")
    else:
        why = "extension not built" if not fg.extension_built() else "no Hopper GPU"
        print(f"path: jnp reference ({why}); the same math, without the kernels")

    kx, kw = jax.random.split(jax.random.key(int(time.time())))
    x = jax.random.normal(kx, (m, k), jnp.bfloat16)
    w = jax.random.normal(kw, (n, k), jnp.bfloat16)

    @jax.jit
    def fp8_linear(x, w):
        a, a_s = fg.quantize_rowwise(x)
        b, b_s = fg.quantize_blockwise(w)
        return fg.gemm(a, a_s, b, b_s)

    y = fp8_linear(x, w).block_until_ready()

    # Checks: against the reference of the same quantized math, and against bf16 x bf16.
    a, a_s = fg.quantize_rowwise(x)
    b, b_s = fg.quantize_blockwise(w)
    ref = jax.jit(fg.reference.gemm, static_argnums=4)(a, a_s, b, b_s, jnp.float32)
    bf16 = jnp.dot(x, w.T, preferred_element_type=jnp.float32)
    d_ref, d_bf16 = calc_diff(y, ref), calc_diff(y, bf16)
    print(f"calc_diff vs reference of the quantized math: {d_ref:.2e} (bar 1e-5)")
    print(f"calc_diff vs bf16 matmul of the unquantized data: {d_bf16:.2e} (bar 1e-3)")

    gemm = jax.jit(fg.gemm)
    gemm(a, a_s, b, b_s).block_until_ready()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(10):
            out = gemm(a, a_s, b, b_s)
        out.block_until_ready()
        times.append((time.perf_counter() - t0) / 10)
    t = float(np.median(times))
    print(f"gemm {m}x{n}x{k}: {t * 1e3:.3f} ms, {2 * m * n * k / t / 1e12:.1f} TFLOP/s "
          f"(wall clock incl. launch; `python -m jax_fp8gemm.bench` measures properly)")
    ok = d_ref <= 1e-5 and d_bf16 <= 1e-3
    print("OK" if ok else "MISMATCH")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
