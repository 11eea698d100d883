"""One of N processes of tests/test_sharding.py::test_two_processes (jax.distributed on localhost,
CPU collectives over gloo, 2 CPU devices per process).

    python tests/distributed_worker.py PROCESS_ID NUM_PROCESSES PORT SEED

Runs a sharded GEMM (M, N and K sharded across both processes) and the expert-parallel MoE
(forward and gradients) on a mesh of every process's devices, and checks them against the same
computation on this process's first device alone. Prints "RESULT ok" or the error.
"""

from __future__ import annotations

import sys
import traceback



def calc_diff(x, y) -> float:
    import numpy as np
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    denom = np.sum(x * x + y * y)
    return float(1.0 - 2.0 * np.sum(x * y) / denom) if denom else 0.0


def main(process_id: int, num_processes: int, port: int, seed: int) -> None:
    import jax
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", 2)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}",
                               num_processes=num_processes, process_id=process_id,
                               initialization_timeout=60)
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    import jax_fp8gemm as fg
    from jax_fp8gemm import parallel

    n = jax.device_count()
    assert n == 2 * num_processes and jax.process_count() == num_processes, (n, jax.process_count())
    mesh = jax.make_mesh((n,), ("d",), axis_types=(AxisType.Auto,))
    mesh2 = jax.make_mesh((2, n // 2), ("p", "q"), axis_types=(AxisType.Auto,) * 2)
    rng = np.random.default_rng(seed)  # the same data in every process
    local = jax.local_devices()[0]

    def shard(x, spec, m=mesh):
        sharding = NamedSharding(m, spec)
        return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])

    def gather(x):
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    def on_one_device(f, *xs):
        return jax.jit(f)(*[jax.device_put(x, local) for x in xs])

    # Sharded GEMM: rows over one mesh axis, weight rows (N) over the other (no communication),
    # then K over every device (a cross-process psum).
    x = rng.standard_normal((256, 512)).astype(np.float32)
    w = rng.standard_normal((512, 512)).astype(np.float32)

    def gemm(x, w):
        a, a_s = fg.quantize_rowwise(x)
        b, b_s = fg.quantize_blockwise(w)
        return fg.gemm(a, a_s, b, b_s, out_dtype=jnp.float32)

    want = np.asarray(on_one_device(gemm, x, w))
    got = gather(jax.jit(gemm)(shard(x, P("p"), mesh2), shard(w, P("q"), mesh2)))
    np.testing.assert_array_equal(got, want)
    got = gather(jax.jit(gemm)(shard(x, P(None, "d")), shard(w, P(None, "d"))))
    assert calc_diff(got, want) <= 1e-10, calc_diff(got, want)

    # Expert-parallel MoE across the processes: forward and gradients.
    t, d, f, e, k = 128, 128, 128, 2 * n, 2
    xs = rng.standard_normal((t, d)).astype(np.float32)
    wr = (rng.standard_normal((d, e)) * 0.1).astype(np.float32)
    wg, wu = ((rng.standard_normal((e, d, f)) * 0.1).astype(np.float32) for _ in range(2))
    wd = (rng.standard_normal((e, f, d)) * 0.1).astype(np.float32)

    def single(x, wg, wu, wd):
        weights, experts = parallel.route(x @ wr, k)
        flat = experts.reshape(-1)
        order = jnp.argsort(flat, stable=True)
        sizes = jnp.bincount(flat, length=e).astype(jnp.int32)
        out = parallel.expert_mlp(jnp.repeat(x, k, axis=0)[order], wg, wu, wd, sizes)
        out = jnp.zeros_like(out).at[order].set(out).reshape(t, k, d)
        return jnp.einsum("tkd,tk->td", out, weights)

    def sharded(x, wg, wu, wd):
        return parallel.moe_expert_parallel(x, x @ wr, wg, wu, wd, top_k=k, mesh=mesh, axis="d")

    def loss(fn):
        return lambda *v: (jnp.sum(fn(*v) ** 2), fn(*v))

    grads = lambda fn: jax.jit(jax.value_and_grad(loss(fn), argnums=(0, 1, 2, 3), has_aux=True))
    (_, y0), g0 = on_one_device(grads(single), xs, wg, wu, wd)
    (_, y1), g1 = grads(sharded)(*(shard(v, P("d")) for v in (xs, wg, wu, wd)))
    assert calc_diff(gather(y1), y0) <= 1e-6, calc_diff(gather(y1), y0)
    for a, b in zip(g1, g0):
        assert calc_diff(gather(a), b) <= 2e-3, calc_diff(gather(a), b)
    print("RESULT ok", flush=True)


if __name__ == "__main__":
    try:
        main(*map(int, sys.argv[1:5]))
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        print("RESULT failed", flush=True)
        sys.exit(1)
    finally:
        try:
            import jax
            jax.distributed.shutdown()
        except Exception:  # noqa: BLE001
            pass
