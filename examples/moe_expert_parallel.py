"""Expert-parallel FP8 mixture-of-experts: experts sharded over every device, tokens dispatched
with all_to_all, local experts as grouped FP8 GEMMs (jax_fp8gemm.parallel).

    python examples/moe_expert_parallel.py [--tokens 1024 --experts 16 --steps 20]

On a machine without accelerators it runs on 8 virtual CPU devices. It checks the sharded layer
against the single-device one (jax_fp8gemm.flax.MoE with the same weights: forward and gradients),
then trains it for a few steps on a synthetic regression target.
"""

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=8").strip()

import argparse  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

from jax_fp8gemm import flax as fgf  # noqa: E402
from jax_fp8gemm import parallel  # noqa: E402


def calc_diff(x, y):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return float(1 - 2 * np.sum(x * y) / np.sum(x * x + y * y))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--d-ff", type=int, default=512)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--bf16", action="store_true", help="bf16 experts instead of FP8")
    ap.add_argument("--capacity-factor", type=float, default=None,
                    help="rows per (source, destination) = factor * tokens_per_device * top_k / "
                         "devices (assignments past it are dropped and counted); default: no drops")
    args = ap.parse_args()
    use_fp8 = not args.bf16

    n = jax.device_count()
    assert args.experts % n == 0 and args.tokens % n == 0, "experts and tokens split over devices"
    mesh = jax.make_mesh((n,), ("expert",), axis_types=(AxisType.Auto,))
    print(f"{n} devices ({jax.devices()[0].platform}), {args.experts} experts "
          f"({args.experts // n} per device), {'FP8' if use_fp8 else 'bf16'} experts")

    model = fgf.MoE(args.d_model, args.d_ff, args.experts, args.top_k, use_fp8=use_fp8,
                    rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(model)
    w_router = model.router.kernel[...]
    params = {"gate": model.w_gate[...], "up": model.w_up[...], "down": model.w_down[...]}
    key_x, key_t = jax.random.split(jax.random.key(1))
    x = jax.random.normal(key_x, (args.tokens, args.d_model), jnp.float32)
    target = jnp.tanh(x @ jax.random.normal(key_t, (args.d_model, args.d_model)) / 16)

    def single(params, x):  # the single-device layer itself
        m = nnx.merge(graphdef, state)
        m.w_gate, m.w_up, m.w_down = (nnx.Param(params[k]) for k in ("gate", "up", "down"))
        return m(x)

    capacity = None
    if args.capacity_factor is not None:
        per_device = args.tokens // n
        capacity = int(np.ceil(args.capacity_factor * per_device * args.top_k / n))
        dropped = int(parallel.dropped_assignments(x @ w_router, top_k=args.top_k, num_devices=n,
                                                   capacity=capacity))
        print(f"capacity {capacity} rows per (source, destination) "
              f"(factor {args.capacity_factor}): {dropped} of {args.tokens * args.top_k} "
              "assignments dropped")

    def sharded(params, x):
        return parallel.moe_expert_parallel(x, x @ w_router, params["gate"], params["up"],
                                            params["down"], top_k=args.top_k, mesh=mesh,
                                            axis="expert", use_fp8=use_fp8, capacity=capacity)

    def loss(fn):
        return lambda params, x: jnp.mean((fn(params, x).astype(jnp.float32) - target) ** 2)

    # Experts (and their gradients) live sharded over the mesh; tokens too (data parallel).
    expert_sharding = NamedSharding(mesh, P("expert"))
    sharded_params = jax.device_put(params, expert_sharding)
    xs = jax.device_put(x, expert_sharding)

    y0 = jax.jit(single)(params, x)
    y1 = jax.jit(sharded)(sharded_params, xs)
    g0 = jax.jit(jax.grad(loss(single)))(params, x)
    g1 = jax.jit(jax.grad(loss(sharded)))(sharded_params, xs)
    print(f"forward   calc_diff(sharded, single) = {calc_diff(y1, y0):.2e}")
    for k in g0:
        print(f"grad {k:5s} calc_diff(sharded, single) = {calc_diff(g1[k], g0[k]):.2e}"
              f"   sharding {g1[k].sharding.spec}")

    opt = optax.adam(args.lr)
    opt_state = opt.init(sharded_params)

    @jax.jit
    def step(params, opt_state, x):
        value, grads = jax.value_and_grad(loss(sharded))(params, x)
        updates, opt_state = opt.update(grads, opt_state)
        return value, optax.apply_updates(params, updates), opt_state

    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        value, sharded_params, opt_state = step(sharded_params, opt_state, xs)
        value = float(value)
        times.append(time.perf_counter() - t0)
        if i % 5 == 0 or i == args.steps - 1:
            print(f"step {i:3d}  loss {value:.5f}")
    print(f"median step time {np.median(times[1:]) * 1e3:.1f} ms (after compilation); expert "
          f"weights stay sharded: {sharded_params['gate'].sharding.spec}")


if __name__ == "__main__":
    main()
