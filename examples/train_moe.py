"""Train a mixture-of-experts block (jax_fp8gemm.flax.MoE) in Flax NNX, FP8 vs bf16 side by side.

    python examples/train_moe.py [--steps 200 --d-model 512 --d-ff 1024 --experts 8 --top-k 2]
                                 [--task classify|regress --classes 256]

Synthetic data generated here (a fixed random teacher; the tasks: ab_training.py), no downloads.
With --task classify a bf16 output head maps the block's output to class logits in both runs. The
FP8 layer runs its gate/up/down projections through fg.ragged_dot (FP8 forward and backward); the
bf16 one through jax.lax.ragged_dot. Prints both loss curves and step times and saves a PNG of the
curves.
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


class Block(nnx.Module):
    """A residual MoE block; with --task classify, a ClassHead gives class logits."""

    def __init__(self, args, fp8, rngs):
        self.norm = nnx.RMSNorm(args.d_model, rngs=rngs)
        self.moe = fgf.MoE(args.d_model, args.d_ff, args.experts, args.top_k, use_fp8=fp8, rngs=rngs)
        self.head = ClassHead(args.d_model, args.classes, rngs) if args.task == "classify" else None

    def __call__(self, x):
        x = x + self.moe(self.norm(x))
        return x if self.head is None else self.head(x)


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
    add_task_args(p)
    args = p.parse_args()
    print(f"path: {'sm_90a kernels' if fg.kernels_enabled() else 'jnp reference'}; {args}")
    # Teacher: x -> x + sin(x @ t1) (regress), or logits sin(x @ t1) @ t2 over `classes` scaled to
    # an entropy of about 3 nats (classify).
    kt, kt2, kd = jax.random.split(jax.random.key(7), 3)
    t1 = jax.random.normal(kt, (args.d_model, args.d_model)) / np.sqrt(args.d_model)
    t2 = 4.0 * jax.random.normal(kt2, (args.d_model, args.classes)) / np.sqrt(args.d_model)
    teacher = (lambda x: jnp.sin(x @ t1) @ t2) if args.task == "classify" else (lambda x: x + jnp.sin(x @ t1))
    data, floor = teacher_batches(args.task, args.d_model, args.tokens, teacher, kd)
    l8, t8 = train(Block(args, True, nnx.Rngs(0)), data, args.steps, args.lr, args.task)
    lb, tb = train(Block(args, False, nnx.Rngs(0)), data, args.steps, args.lr, args.task)
    report(l8, t8, lb, tb, args.plot,
           f"MoE {args.experts} experts top-{args.top_k}, d_model={args.d_model}, {args.task}", floor)


if __name__ == "__main__":
    main()
