"""Timing that a benchmark table can trust.

The op runs `reps` times back to back inside ONE jitted executable, each time on its own input set
(so repeated runs do not hit in L2 and XLA cannot merge them). Where torch is installed, the time
is KERNEL time: CUPTI (through torch.profiler, which records every kernel in the process, XLA's
included) sums the device time of all kernels the executable ran, divided by reps; that is what
DeepGEMM reports and it is not swamped by launch overhead on small shapes. Without torch it is the
executable's wall time over block_until_ready divided by reps. Median of several executions.
Torch peers are timed the same way.

Protocol "flushed" (`--protocol flushed`) is DeepGEMM's (deep_gemm.testing.bench_kineto), under
which SPEC's performance bars were measured: before every call a 2 GB memset flushes L2 (and
pauses the tensor cores), then ONE call runs on the first input set; its kernel time (CUPTI, the
memset's kernel excluded) is averaged over 30 calls.

The default, "sustained", times back-to-back calls, but in bursts of ~10-30 ms of load that start
from idle (compiling and making inputs come between the ops). The GPU's power controller lets a
GEMM draw more than the power limit for its first ~20-40 ms (an H200: ~790 W against 700 W) and
only then steps the SM clock down, by 10-17% (RESULTS.md, session 41). So "sustained" mostly
times that first stretch. Protocol "settled" (`--protocol settled`) first runs each op back to back
for SETTLE_SECONDS, then times windows of ~0.25 s of back-to-back calls: the power-capped state
that a long training or serving run lives in, where the op that spends less energy per FLOP gets
the higher clock.
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


def _device_seconds(prof, only: str | None = None, skip: tuple[str, ...] = ()) -> float:
    """Device time a torch profile recorded: of the kernels whose name contains `only` (all when
    None) and none of `skip`."""
    return 1e-6 * sum(getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0))
                      for e in prof.key_averages()
                      if (only is None or only in e.key) and not any(f in e.key for f in skip))


def _kernel_seconds(run_once: Callable[[], None], only: str | None = None) -> float | None:
    """Sum of the device time of every kernel run_once() launched (CUPTI), or None if unavailable;
    with `only`, of the kernels whose name contains it."""
    try:
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return None
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run_once()
    seconds = _device_seconds(prof, only)
    return seconds if seconds > 0 else None


METHOD = {"name": "wall"}  # "kernel" once CUPTI timing worked; reported in the table header
PROTOCOL = {"name": "sustained"}  # or "settled" / "flushed" (see the module doc)
_FLUSH_BYTES = 2 << 30
_FLUSH_CALLS = 30
SETTLE_SECONDS = 1.5
_SETTLED_WINDOW_SECONDS = 0.25


def _settle(run_once: Callable[[], None]) -> int:
    """Protocol "settled": run back to back until the power controller has set its clock; then
    the number of calls per timed window (~0.25 s of load each, so that a window is not timed
    right after an idle gap). 1 for the other protocols."""
    if PROTOCOL["name"] != "settled":
        return 1
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < SETTLE_SECONDS:
        run_once()
        calls += 1
    return max(1, round(calls * _SETTLED_WINDOW_SECONDS / (time.perf_counter() - t0)))


def _flushed_kernel_seconds(call: Callable[[], None], only: str | None = None) -> float:
    """DeepGEMM's protocol: memset 2 GB, then one call; mean CUPTI kernel time of the calls (with
    `only`: of the kernels whose name contains it)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    call()  # warm up
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(_FLUSH_CALLS):
            flush.zero_()
            torch.cuda.synchronize()  # JAX runs on its own stream: order the flush before the call
            call()
    del flush
    METHOD["name"] = "kernel"
    return _device_seconds(prof, only, skip=("fill", "Fill", "memset", "Memset")) / _FLUSH_CALLS


def _median_time(run_once: Callable[[], None], reps: int, iters: int, calls: int = 1,
                 only: str | None = None) -> float:
    """Median over `iters` windows of `calls` run_once() calls (each `reps` ops) of the time per op
    (with `only`: the kernel time of the kernels whose name contains it; CUPTI, or an error)."""
    def window():
        for _ in range(calls):
            run_once()

    times = []
    for _ in range(iters):
        kernel = _kernel_seconds(window, only)
        if only is not None and kernel is None:
            raise RuntimeError(f"no kernel time of kernels named *{only}* (needs torch's CUPTI)")
        if kernel is not None:
            METHOD["name"] = "kernel"
            times.append(kernel / (reps * calls))
            continue
        t0 = time.perf_counter()
        window()
        times.append((time.perf_counter() - t0) / (reps * calls))
    return statistics.median(times)


def time_jax(fn: Callable, input_sets: Sequence[tuple], iters: int = 5, only: str | None = None) -> float:
    """Median seconds per call of fn(*inputs), over rotating input sets in one executable
    (protocol "flushed": one call at a time after an L2 flush, see the module doc). `only`: the
    time of the kernels whose name contains it, not of everything the executable ran."""
    if PROTOCOL["name"] == "flushed":
        one = jax.jit(fn)
        return _flushed_kernel_seconds(lambda: jax.block_until_ready(one(*input_sets[0])), only)
    run = jax.jit(lambda sets: [fn(*s) for s in sets])
    jax.block_until_ready(run(input_sets))  # compile + warm up
    run_once = lambda: jax.block_until_ready(run(input_sets))  # noqa: E731
    return _median_time(run_once, len(input_sets), iters, _settle(run_once), only)


def time_torch(fn: Callable, input_sets: Sequence[tuple], iters: int = 5) -> float:
    import torch

    if PROTOCOL["name"] == "flushed":
        def one():
            fn(*input_sets[0])
            torch.cuda.synchronize()
        return _flushed_kernel_seconds(one)

    def run_once():
        for s in input_sets:
            fn(*s)
        torch.cuda.synchronize()

    run_once()  # warm up
    return _median_time(run_once, len(input_sets), iters, _settle(run_once))
