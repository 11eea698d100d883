"""Sharded ops on every local GPU against one GPU (for nvidia-h200-x2/-x4 machines).

    python tools/multi_gpu_check.py

GEMM with M, N and K sharded, grouped GEMM with experts sharded, under plain jax.jit with sharded
inputs (automatic partitioning through the ops' sharding rules): calc_diff against the same op on
one GPU, and the collectives in the compiled HLO.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import jax_fp8gemm as fg


def calc_diff(x, y):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return float(1 - 2 * np.sum(x * y) / np.sum(x * x + y * y))


n = jax.device_count()
mesh = jax.make_mesh((n,), ("x",), axis_types=(AxisType.Auto,))
one = jax.devices()[0]
print(f"{n} x {one.device_kind}; kernels enabled: {fg.kernels_enabled()}")
key = jax.random.split(jax.random.key(0), 4)
m, nn, k, g = (4096, 4096, 7168, 8) if fg.kernels_enabled() else (512, 256, 512, 8)
a, a_s = fg.quantize_rowwise(jax.random.normal(key[0], (m, k), jnp.bfloat16))
b, b_s = fg.quantize_blockwise(jax.random.normal(key[1], (nn, k), jnp.bfloat16))
bg, bg_s = fg.quantize_blockwise(jax.random.normal(key[2], (g, nn, k), jnp.bfloat16))
sizes = jnp.asarray([700, 300, 0, 900, 512, 488, 1000, 196], jnp.int32) * m // 4096


def put(x, spec):
    return jax.device_put(x, NamedSharding(mesh, spec))


def check(name, fn, args, specs, bar=1e-5):
    ref = jax.jit(fn)(*[jax.device_put(x, one) for x in args])
    f = jax.jit(fn)
    sharded = [put(x, s) for x, s in zip(args, specs)]
    out = f(*sharded)
    hlo = f.lower(*sharded).compile().as_text()
    coll = sorted(set(re.findall(r"(all-gather|all-reduce|all-to-all|reduce-scatter|collective-permute)", hlo)))
    d = calc_diff(out.astype(jnp.float32), ref.astype(jnp.float32))
    ok = d <= bar
    print(f"{'ok  ' if ok else 'FAIL'} {name:40s} calc_diff={d:.2e} out sharding={out.sharding.spec} "
          f"collectives={coll or 'none'}")
    return ok


results = [
    check("gemm M sharded", fg.gemm, (a, a_s, b, b_s), (P("x"), P("x"), P(), P())),
    check("gemm N sharded", fg.gemm, (a, a_s, b, b_s), (P(), P(), P("x"), P("x"))),
    check("gemm K sharded (psum)", lambda a, a_s, b, b_s: fg.gemm(a, a_s, b, b_s, out_dtype=jnp.float32),
          (a, a_s, b, b_s), (P(None, "x"), P(None, "x"), P(None, "x"), P(None, "x"))),
    check("grouped_gemm experts sharded", fg.grouped_gemm, (a, a_s, bg, bg_s, sizes),
          (P(), P(), P("x"), P("x"), P())),
    check("grouped_gemm M sharded", fg.grouped_gemm, (a, a_s, bg, bg_s, sizes),
          (P("x"), P("x"), P(), P(), P())),
]
print("multi-GPU checks:", "all ok" if all(results) else "FAILURES")
