"""Where one training step's GPU time goes: the kernels of the MLP example's step (FP8 and bf16),
summed per kernel name over a few steps (CUPTI through torch.profiler), largest first.

    python tools/profile_step.py [--d-model 4096 --d-ff 14336 --tokens 8192 --layers 1 --top 25]
    python tools/profile_step.py --linear 8192x8192x8192 --steps 20   # one fg.fp8_dot forward +
                                                  # backward (tokens x K x N) against jnp.dot
"""

import argparse
import collections
import os
import sys

import jax
import jax.numpy as jnp

import jax_fp8gemm as fg
from jax_fp8gemm.bench.suites import fwd_bwd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
from ab_training import add_task_args, make_step  # noqa: E402
from train_mlp import build, make_data  # noqa: E402


def profile(step, state, data, steps, top):
    from torch.profiler import ProfilerActivity, profile as torch_profile

    for i in range(3):  # compile + warm up
        state, loss = step(state, *data[i % len(data)])
    jax.block_until_ready(loss)
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(steps):
            state, loss = step(state, *data[i % len(data)])
        jax.block_until_ready(loss)
    per_kernel = collections.Counter()
    launches = 0
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0))
        if t > 0:
            per_kernel[e.key] += t / steps
            launches += e.count
    total = sum(per_kernel.values())
    print(f"  GPU kernel time per step: {total / 1e3:.2f} ms in {launches / steps:.0f} kernels")
    for name, t in per_kernel.most_common(top):
        print(f"  {t / 1e3:7.3f} ms {100 * t / total:5.1f}%  {name[:110]}")


def linear_step(dot):
    """The benchmark's train-suite step (bench.suites.fwd_bwd) in profile()'s signature."""
    run = fwd_bwd(dot)
    return jax.jit(lambda state, *xs: (state, run(*xs)))


def linear_data(shape):
    t, k, n = shape
    keys = jax.random.split(jax.random.key(0), 3)
    return [tuple(jax.random.normal(key, s, jnp.float32).astype(jnp.bfloat16)
                  for key, s in zip(keys, ((t, k), (k, n), (t, n))))]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--d-model", type=int, default=4096)
    p.add_argument("--d-ff", type=int, default=14336)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--linear", metavar="TxKxN", help="profile fg.fp8_dot forward + backward instead")
    add_task_args(p)
    args = p.parse_args()
    if args.linear:
        data = linear_data(tuple(int(v) for v in args.linear.split("x")))
        for name, dot in (("FP8 (fg.fp8_dot)", fg.fp8_dot), ("bf16 (jnp.dot)", jnp.dot)):
            print(f"== {name} {args.linear}")
            profile(linear_step(dot), None, data, args.steps, args.top)
        return
    data, _ = make_data(args)
    for fp8 in (True, False):
        print(f"== {'FP8 (jax_fp8gemm)' if fp8 else 'bf16'}")
        step, state = make_step(build(args, fp8), 1e-3, args.task)
        profile(step, state, data, args.steps, args.top)


if __name__ == "__main__":
    main()
