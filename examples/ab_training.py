"""What the FP8-vs-bf16 training examples share: the optax training loop and the report.

Used by examples/train_mlp.py and examples/train_moe.py (run them from anywhere: they put this
folder on sys.path).
"""

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx


def make_step(model, lr: float):
    """(step, state): one Adam step on the mean squared error as a pure jax.jit function of the
    model's and optimizer's state (split once, buffers donated): step(state, x, y) -> (state, loss).
    Also used by tools/profile_step.py."""
    opt = nnx.Optimizer(model, optax.adamw(lr), wrt=nnx.Param)
    graphdef, state = nnx.split((model, opt))

    @functools.partial(jax.jit, donate_argnums=0)
    def step(state, x, y):
        model, opt = nnx.merge(graphdef, state)

        def loss_fn(m):
            return jnp.mean((m(x).astype(jnp.float32) - y) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return nnx.state((model, opt)), loss

    return step, state


def train(model, data, steps: int, lr: float):
    """Adam on the mean squared error; returns (losses, seconds per step).

    A step costs one executable launch on the host (make_step). Steps are dispatched back to back
    and timed over the whole run with one synchronisation at the end (what a training loop does),
    after 5 warm-up steps that include compilation.
    """
    step, state = make_step(model, lr)
    warmup = min(5, steps)
    losses = []
    for i in range(warmup):
        state, loss = step(state, *data[i % len(data)])
        losses.append(loss)
    jax.block_until_ready(losses)
    t0 = time.perf_counter()
    for i in range(warmup, steps):
        state, loss = step(state, *data[i % len(data)])
        losses.append(loss)
    jax.block_until_ready(losses)
    seconds = (time.perf_counter() - t0) / max(steps - warmup, 1)
    return np.array([float(v) for v in losses]), seconds


def report(l8, t8, lb, tb, plot: str, title: str) -> None:
    """Prints both loss curves and step times; saves a PNG of the curves when matplotlib exists."""
    steps = len(l8)
    for i in list(range(0, steps, max(1, steps // 10))) + [steps - 1]:
        print(f"step {i:4d}  fp8 {l8[i]:.5f}  bf16 {lb[i]:.5f}")
    f8, fb = l8[-10:].mean(), lb[-10:].mean()
    print(f"final loss (mean of last 10): fp8 {f8:.5f}  bf16 {fb:.5f}  rel. diff {abs(f8 - fb) / fb:.2%}")
    print(f"step time: fp8 {t8 * 1e3:.2f} ms  bf16 {tb * 1e3:.2f} ms  speedup {tb / t8:.2f}x")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    plt.figure(figsize=(7, 4))
    plt.plot(l8, label="fp8 (jax_fp8gemm)")
    plt.plot(lb, label="bf16")
    plt.yscale("log")
    plt.xlabel("step")
    plt.ylabel("loss")
    plt.legend()
    plt.title(title)
    plt.savefig(plot, dpi=100)
    print(f"saved {plot}")
