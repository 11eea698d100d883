"""Decode tile sweep: every 64-row tile (64x32 / 64x64 / 64x128, no clusters) on M <= 64 shapes,
beside the tile `gemm_config.pick` takes. The measured table behind `gemm_config._decode_block_n`
(RESULTS.md, session 21). Run on a Hopper machine with the package installed (not from the repo
root, whose jax_fp8gemm has no compiled extension):

    cd /tmp && python /path/to/tools/decode_tile_sweep.py [--m 1,32,64] [--n 1024,...] [--k 7168,2048]

Protocol: 8-48 back-to-back calls on rotating inputs in one jit, median over 5 runs of the device
span per call (CUPTI through torch.profiler: first kernel start to last kernel end). A's scales are
passed MN-major, as inside a jitted model.
"""
import argparse
import importlib
import statistics

import jax
import jax.numpy as jnp
from torch.profiler import ProfilerActivity, profile

import jax_fp8gemm as fg
from jax_fp8gemm import _kernels, gemm_config

gemm = importlib.import_module("jax_fp8gemm.gemm")


def span_us(run, calls: int, iters: int = 5) -> float:
    spans = []
    for _ in range(iters):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
        ev = [e for e in prof.events() if e.device_type.name == "CUDA"]
        spans.append((max(e.time_range.end for e in ev) - min(e.time_range.start for e in ev)) / calls)
    return statistics.median(spans)


def inputs(m: int, n: int, k: int, sets: int, seed: int):
    key, out = jax.random.key(seed), []
    for _ in range(sets):
        k1, k2, key = jax.random.split(key, 3)
        a, a_s = fg.quantize_rowwise(jax.random.normal(k1, (m, k), jnp.bfloat16))
        b, b_s = fg.quantize_blockwise(jax.random.normal(k2, (n, k), jnp.bfloat16))
        out.append((a, gemm.mn_major_scales(a_s), b, b_s))
    return out


def time_tile(m: int, n: int, block_n: int, ins, sms: int) -> float:
    cfg = gemm_config.GemmConfig(64, block_n, 0, sms, 1)
    out = jax.ShapeDtypeStruct((m, n), jnp.bfloat16)
    call = lambda a, s, b, bs: jax.ffi.ffi_call("fp8gemm_gemm", out)(a, s, b, bs, **cfg.attributes())
    f = jax.jit(lambda xs: [call(*x) for x in xs])
    jax.block_until_ready(f(ins))
    return span_us(lambda: jax.block_until_ready(f(ins)), len(ins))


def main():
    ints = lambda s: [int(v) for v in s.split(",")]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--m", type=ints, default=[1, 32, 64])
    p.add_argument("--n", type=ints, default=[1024, 2112, 3072, 4096, 5120, 6144, 7168, 8192, 14336])
    p.add_argument("--k", type=ints, default=[7168, 2048])
    args = p.parse_args()
    sms = _kernels.num_sms()
    losses = []
    for k in args.k:
        for n in args.n:
            for m in args.m:
                ins = inputs(m, n, k, max(8, min(48, int(400e6 // (n * k)))), seed=n + k + m)
                times = {bn: time_tile(m, n, bn, ins, sms) for bn in (32, 64, 128)}
                best = min(times, key=times.get)
                picked = gemm_config.pick(m, n, k, jnp.bfloat16, sms).block_n
                losses.append(times[picked] / times[best])
                print(f"{m:3d}x{n:5d}x{k:5d} " + " ".join(f"64x{bn:<3d} {t:7.2f}" for bn, t in times.items())
                      + f" | pick 64x{picked} ({losses[-1]:.3f} of best 64x{best})", flush=True)
    print(f"pick vs best tile over {len(losses)} shapes: mean {statistics.mean(losses):.3f}, worst {max(losses):.3f}")


if __name__ == "__main__":
    main()
