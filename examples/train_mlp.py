"""Train a transformer-sized MLP stack in Flax NNX, FP8 vs bf16 side by side.

    python examples/train_mlp.py [--steps 200 --d-model 1024 --d-ff 4096 --tokens 2048 --layers 2]

Synthetic regression data (a fixed random teacher network) generated here, no downloads. Prints
both loss curves and step times, and saves a PNG of the curves (--plot).
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


class MLPStack(nnx.Module):
    def __init__(self, d_model, d_ff, layers, fp8, rngs):
        make = fgf.Linear if fp8 else nnx.Linear
        kw = dict(dtype=jnp.bfloat16, use_bias=False)
        self.ups = nnx.List([make(d_model, d_ff, rngs=rngs, **kw) for _ in range(layers)])
        self.downs = nnx.List([make(d_ff, d_model, rngs=rngs, **kw) for _ in range(layers)])
        self.norm = nnx.RMSNorm(d_model, rngs=rngs)

    def __call__(self, x):
        for up, down in zip(self.ups, self.downs):
            x = x + down(jax.nn.gelu(up(self.norm(x))))
        return x


def train(fp8, args, data):
    model = MLPStack(args.d_model, args.d_ff, args.layers, fp8, nnx.Rngs(0))
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
        loss = float(step(model, opt, x, y))
        times.append(time.perf_counter() - t0)
        losses.append(loss)
    return np.array(losses), float(np.median(times[5:] if len(times) > 10 else times))


def make_data(args):
    key = jax.random.key(42)
    kt1, kt2, kd = jax.random.split(key, 3)
    t1 = jax.random.normal(kt1, (args.d_model, args.d_model)) / np.sqrt(args.d_model)
    t2 = jax.random.normal(kt2, (args.d_model, args.d_model)) / np.sqrt(args.d_model)
    data = []
    for k in jax.random.split(kd, 8):
        x = jax.random.normal(k, (args.tokens, args.d_model))
        y = jnp.tanh(x @ t1) @ t2
        data.append((x.astype(jnp.bfloat16), y))
    return data


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--d-ff", type=int, default=2048)
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--plot", default="train_mlp.png")
    args = p.parse_args()
    print(f"path: {'sm_90a kernels' if fg.kernels_enabled() else 'jnp reference'}; {args}")
    data = make_data(args)
    l8, t8 = train(True, args, data)
    lb, tb = train(False, args, data)
    for i in list(range(0, args.steps, max(1, args.steps // 10))) + [args.steps - 1]:
        print(f"step {i:4d}  fp8 {l8[i]:.5f}  bf16 {lb[i]:.5f}")
    final8, finalb = l8[-10:].mean(), lb[-10:].mean()
    print(f"final loss (mean of last 10): fp8 {final8:.5f}  bf16 {finalb:.5f}  "
          f"rel. diff {abs(final8 - finalb) / finalb:.2%}")
    print(f"step time: fp8 {t8 * 1e3:.2f} ms  bf16 {tb * 1e3:.2f} ms  speedup {tb / t8:.2f}x")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        plt.figure(figsize=(7, 4))
        plt.plot(l8, label="fp8 (jax_fp8gemm)")
        plt.plot(lb, label="bf16")
        plt.yscale("log"); plt.xlabel("step"); plt.ylabel("loss"); plt.legend()
        plt.title(f"MLP d_model={args.d_model} d_ff={args.d_ff}")
        plt.savefig(args.plot, dpi=100)
        print(f"saved {args.plot}")
    except ImportError:
        pass


if __name__ == "__main__":
    main()
