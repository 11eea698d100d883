"""Train a transformer-sized MLP stack in Flax NNX, FP8 vs bf16 side by side.

    python examples/train_mlp.py [--steps 200 --d-model 1024 --d-ff 4096 --tokens 2048 --layers 2]

Synthetic regression data (a fixed random teacher network) generated here, no downloads. Prints
both loss curves and step times, and saves a PNG of the curves (--plot).
"""

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import jax_fp8gemm as fg
from jax_fp8gemm import flax as fgf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_training import report, train  # noqa: E402


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
    l8, t8 = train(MLPStack(args.d_model, args.d_ff, args.layers, True, nnx.Rngs(0)), data, args.steps, args.lr)
    lb, tb = train(MLPStack(args.d_model, args.d_ff, args.layers, False, nnx.Rngs(0)), data, args.steps,
                   args.lr)
    report(l8, t8, lb, tb, args.plot, f"MLP d_model={args.d_model} d_ff={args.d_ff}")


if __name__ == "__main__":
    main()
