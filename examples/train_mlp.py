"""Train a transformer-sized MLP stack in Flax NNX, FP8 vs bf16 side by side.

    python examples/train_mlp.py [--steps 200 --d-model 1024 --d-ff 4096 --tokens 2048 --layers 2]
                                 [--task classify|regress --classes 256]

Synthetic data from a fixed random teacher network, generated here, no downloads (the tasks:
ab_training.py). With --task classify a bf16 output head maps the stack's output to class logits
in both runs (DeepSeek-V3 keeps its output head in bf16 too); the MLP projections are FP8 in one
run and bf16 in the other. Prints both loss curves and step times, and saves a PNG of the curves
(--plot).
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
from ab_training import ClassHead, add_task_args, report, teacher_batches, train  # noqa: E402


class MLPStack(nnx.Module):
    """Residual MLP blocks, x + down(gelu(up(norm(x)))); with `classes`, a ClassHead gives class
    logits. FP8: each block is one fgf.MLP (fg.fp8_mlp, gelu fused into the quantizations);
    bf16: the same layer with use_fp8=False, i.e. two bf16 matmuls around jax.nn.gelu, as two
    nnx.Linear layers compute them. Same parameters, same initialization."""

    def __init__(self, d_model, d_ff, layers, fp8, rngs, classes=0):
        self.blocks = nnx.List([fgf.MLP(d_model, d_ff, use_fp8=fp8, dtype=jnp.bfloat16, rngs=rngs)
                                for _ in range(layers)])
        self.norm = nnx.RMSNorm(d_model, rngs=rngs)
        self.head = ClassHead(d_model, classes, rngs) if classes else None

    def __call__(self, x):
        for block in self.blocks:
            x = x + block(self.norm(x))
        return x if self.head is None else self.head(x)


def build(args, fp8):
    return MLPStack(args.d_model, args.d_ff, args.layers, fp8, nnx.Rngs(0),
                    classes=args.classes if args.task == "classify" else 0)


def make_data(args):
    """(batches, loss floor): x -> tanh(x @ t1) @ t2, a d_model vector (regress) or logits over
    `classes` scaled to a teacher entropy of about 3 nats (classify)."""
    kt1, kt2, kd = jax.random.split(jax.random.key(42), 3)
    out = args.classes if args.task == "classify" else args.d_model
    t1 = jax.random.normal(kt1, (args.d_model, args.d_model)) / np.sqrt(args.d_model)
    t2 = jax.random.normal(kt2, (args.d_model, out)) / np.sqrt(args.d_model)
    if args.task == "classify":
        t2 = 4.0 * t2
    return teacher_batches(args.task, args.d_model, args.tokens, lambda x: jnp.tanh(x @ t1) @ t2, kd)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--d-ff", type=int, default=2048)
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--plot", default="train_mlp.png")
    add_task_args(p)
    args = p.parse_args()
    print(f"path: {'sm_90a kernels' if fg.kernels_enabled() else 'jnp reference'}; {args}")
    data, floor = make_data(args)
    l8, t8 = train(build(args, True), data, args.steps, args.lr, args.task)
    lb, tb = train(build(args, False), data, args.steps, args.lr, args.task)
    report(l8, t8, lb, tb, args.plot, f"MLP d_model={args.d_model} d_ff={args.d_ff}, {args.task}", floor)


if __name__ == "__main__":
    main()
