"""Timing that a benchmark table can trust.

JAX: the op runs `reps` times back to back inside ONE jitted executable, each time on its own input
set (so repeated runs do not hit in L2 and XLA cannot merge them), and the executable's wall time
over block_until_ready is divided by reps. That amortises launch overhead (which dominates small
shapes when each call is timed alone) while staying close to kernel time; the median of several
executions is reported. Torch: CUDA events around the same rotation.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence

import jax

L2_BYTES = 64 << 20  # more than an H100's (50 MB) or H200's (60 MB) L2


def sets_needed(bytes_per_set: int, min_reps: int = 8, max_reps: int = 64) -> int:
    """Input sets to rotate through so that the data touched between two uses exceeds L2."""
    return max(min_reps, min(max_reps, -(-2 * L2_BYTES // max(bytes_per_set, 1))))


def time_jax(fn: Callable, input_sets: Sequence[tuple], iters: int = 7) -> float:
    """Median seconds per call of fn(*inputs), over rotating input sets in one executable."""
    run = jax.jit(lambda sets: [fn(*s) for s in sets])
    jax.block_until_ready(run(input_sets))  # compile + warm up
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        jax.block_until_ready(run(input_sets))
        times.append((time.perf_counter() - t0) / len(input_sets))
    return statistics.median(times)


def time_torch(fn: Callable, input_sets: Sequence[tuple], iters: int = 7) -> float:
    import torch

    for s in input_sets[:2]:
        fn(*s)
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for s in input_sets:
            fn(*s)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / len(input_sets))
    return statistics.median(times)
