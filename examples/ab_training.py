"""What the FP8-vs-bf16 training examples share: the synthetic tasks, the optax training loop and
the report.

Used by examples/train_mlp.py and examples/train_moe.py (run them from anywhere: they put this
folder on sys.path).

Two tasks, both from a fixed random teacher (no downloads):
  classify  (default) soft-target cross-entropy: the model's logits over `classes` classes against
            the teacher's class probabilities. Like language-model training, the loss has a floor
            (the teacher's entropy) that no model goes below; the report also prints each run's
            excess over that floor.
  regress   mean squared error against the teacher's vector output. The loss goes to zero as the
            model learns; what remains at the end includes the FP8 rounding noise of the last
            projection's output, which this loss sees directly.
"""

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx


class ClassHead(nnx.Module):
    """The classify task's output head: RMSNorm and a bf16 Linear to class logits, the same in the
    FP8 and the bf16 run (DeepSeek-V3 keeps its output head in bf16 too)."""

    def __init__(self, d_model: int, classes: int, rngs: nnx.Rngs):
        self.norm = nnx.RMSNorm(d_model, rngs=rngs)
        self.linear = nnx.Linear(d_model, classes, dtype=jnp.bfloat16, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.linear(self.norm(x))


def add_task_args(parser):
    parser.add_argument("--task", choices=("classify", "regress"), default="classify")
    parser.add_argument("--classes", type=int, default=256)


def teacher_batches(task: str, d_model: int, tokens: int, teacher, key, num_batches: int = 8):
    """Batches (x bf16 [tokens, d_model], target) of the synthetic task, and the loss floor.

    teacher(x) -> [tokens, d_model] (regress) or [tokens, classes] logits (classify); targets are
    f32 vectors or class probabilities. The floor is 0 (regress) or the teacher's mean entropy."""
    data, entropy = [], []
    for k in jax.random.split(key, num_batches):
        x = jax.random.normal(k, (tokens, d_model))
        out = teacher(x)
        if task == "classify":
            entropy.append(float(-(jax.nn.softmax(out) * jax.nn.log_softmax(out)).sum(-1).mean()))
            out = jax.nn.softmax(out)
        data.append((x.astype(jnp.bfloat16), out))
    return data, (float(np.mean(entropy)) if entropy else 0.0)


def loss_of(task: str):
    if task == "classify":
        return lambda out, target: optax.softmax_cross_entropy(out.astype(jnp.float32), target).mean()
    return lambda out, target: jnp.mean((out.astype(jnp.float32) - target) ** 2)


def make_step(model, lr, task: str = "regress"):
    """(step, state): one AdamW step on the task's loss as a pure jax.jit function of the model's
    and optimizer's state (split once, buffers donated): step(state, x, y) -> (state, loss).
    `lr`: a float or an optax schedule.
    Also used by tools/profile_step.py."""
    task_loss = loss_of(task)
    opt = nnx.Optimizer(model, optax.adamw(lr), wrt=nnx.Param)
    graphdef, state = nnx.split((model, opt))

    @functools.partial(jax.jit, donate_argnums=0)
    def step(state, x, y):
        model, opt = nnx.merge(graphdef, state)

        def loss_fn(m):
            return task_loss(m(x), y)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return nnx.state((model, opt)), loss

    return step, state


def train(model, data, steps: int, lr: float, task: str):
    """AdamW on the task's loss, the learning rate warmed up over the first 10% of the steps to
    `lr` and cosine-decayed to lr/10, as training runs do. (MLP at d_model 4096: a constant 1e-3
    made the classify loss climb back up after step 120 in bf16 and FP8 alike; warmed up to 1e-3,
    the FP8 run spiked around step 40 and the bf16 one did not; at 3e-4 both train smoothly.)
    Returns (losses, seconds per step).

    A step costs one executable launch on the host (make_step). Steps are dispatched back to back
    and timed over the whole run with one synchronisation at the end (what a training loop does),
    after 5 warm-up steps that include compilation.
    """
    schedule = optax.warmup_cosine_decay_schedule(0.0, lr, max(1, steps // 10), max(steps, 1), lr / 10)
    step, state = make_step(model, schedule, task)
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


def report(l8, t8, lb, tb, plot: str, title: str, floor: float = 0.0) -> None:
    """Prints both loss curves and step times; saves a PNG of the curves when matplotlib exists.
    `floor`: the task's smallest possible loss (classify: the teacher's entropy)."""
    steps = len(l8)
    for i in list(range(0, steps, max(1, steps // 10))) + [steps - 1]:
        print(f"step {i:4d}  fp8 {l8[i]:.5f}  bf16 {lb[i]:.5f}")
    f8, fb = l8[-10:].mean(), lb[-10:].mean()
    print(f"final loss (mean of last 10): fp8 {f8:.5f}  bf16 {fb:.5f}  rel. diff {abs(f8 - fb) / fb:.2%}")
    if floor:
        e8, eb = f8 - floor, fb - floor
        print(f"excess over the loss floor {floor:.5f}: fp8 {e8:.5f}  bf16 {eb:.5f}  "
              f"rel. diff {abs(e8 - eb) / eb:.2%}")
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
