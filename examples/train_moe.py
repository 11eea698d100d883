"""Train a mixture-of-experts block (jax_fp8gemm.flax.MoE) in Flax NNX, FP8 vs bf16 side by side.

    python examples/train_moe.py [--steps 200 --d-model 512 --d-ff 1024 --experts 8 --top-k 2]

Synthetic data generated here (a fixed random teacher), no downloads. The FP8 layer runs its
gate/up/down projections through fg.ragged_dot (FP8 forward and backward); the bf16 one through
jax.lax.ragged_dot. Prints both loss curves and step times and saves a PNG of the curves.
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import jax_fp8gemm as fg
from jax_fp8gemm import flax as fgf


class Block(nnx.Module):
    def __init__(self, args, fp8, rngs):
        self.norm = nnx.RMSNorm(args.d_model, rngs=rngs)
        self.moe = fgf.MoE(args.d_model, args.d_ff, args.experts, args.top_k, use_fp8=fp8, rngs=rngs)

    def __call__(self, x):
        return x + self.moe(self.norm(x))


def train(fp8, args, data):
    model = Block(args, fp8, nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.adamw(args.lr), wrt=nnx.Param)

    @nnx.jit
    def step(model, opt, x, y):
        def loss_fn(m):
            return jnp.mean((m(x).astype(jnp.float32) - y) ** 2)
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return loss

    losses, times = [], []
    for i in range(args.steps):
        x, y = data[i % len(data)]
        t0 = time.perf_counter()
        losses.append(float(step(model, opt, x, y)))
        times.append(time.perf_counter() - t0)
    return np.array(losses), float(np.median(times[5:] if len(times) > 10 else times))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--plot", default="train_moe.png")
    args = p.parse_args()
    print(f"path: {'sm_90a kernels' if fg.kernels_enabled() else 'jnp reference'}; {args}")
    kt, kd = jax.random.split(jax.random.key(7))
    teacher = jax.random.normal(kt, (args.d_model, args.d_model)) / np.sqrt(args.d_model)
    data = []
    for k in jax.random.split(kd, 8):
        x = jax.random.normal(k, (args.tokens, args.d_model))
        data.append((x.astype(jnp.bfloat16), x + jnp.sin(x @ teacher)))
    l8, t8 = train(True, args, data)
    lb, tb = train(False, args, data)
    for i in list(range(0, args.steps, max(1, args.steps // 10))) + [args.steps - 1]:
        print(f"step {i:4d}  fp8 {l8[i]:.5f}  bf16 {lb[i]:.5f}")
    f8, fb = l8[-10:].mean(), lb[-10:].mean()
    print(f"final loss (mean of last 10): fp8 {f8:.5f}  bf16 {fb:.5f}  rel. diff {abs(f8 - fb) / fb:.2%}")
    print(f"step time: fp8 {t8 * 1e3:.2f} ms  bf16 {tb * 1e3:.2f} ms  speedup {tb / t8:.2f}x")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        plt.figure(figsize=(7, 4))
        plt.plot(l8, label="fp8 (jax_fp8gemm)")
        plt.plot(lb, label="bf16")
        plt.yscale("log"); plt.xlabel("step"); plt.ylabel("loss"); plt.legend()
        plt.title(f"MoE {args.experts} experts top-{args.top_k}, d_model={args.d_model}")
        plt.savefig(args.plot, dpi=100)
        print(f"saved {args.plot}")
    except ImportError:
        pass


if __name__ == "__main__":
    main()
