"""python -m jax_fp8gemm.bench [--suite quantize,gemm] [--out DIR] [--shapes MxNxK,...]
                              [--protocol sustained|settled|flushed]

Prints one table of our ops and their peers measured side by side in this run, writes
DIR/results.json and DIR/results.png.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave room for torch's peers


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m jax_fp8gemm.bench", description=__doc__)
    p.add_argument("--suite", default="quantize,gemm,grouped")
    p.add_argument("--out", default="bench_out")
    p.add_argument("--shapes", default="", help="gemm shapes MxNxK,... (default: SPEC's table)")
    p.add_argument("--protocol", default="sustained", choices=("sustained", "settled", "flushed"),
                   help="sustained: back-to-back calls in short bursts (mostly before the power "
                        "controller lowers the clock); settled: the same after 1.5 s of back-to-back "
                        "calls (the power-capped clock of a long run); flushed: DeepGEMM's (L2 "
                        "flushed before each call), under which SPEC's bars were measured (needs torch)")
    args = p.parse_args(argv)

    import jax

    import jax_fp8gemm as fg

    from . import report, suites, timing

    timing.PROTOCOL["name"] = args.protocol

    path = "sm_90a kernels" if fg.kernels_enabled() else "jnp reference (no Hopper kernels)"
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; our ops run: {path}",
          flush=True)
    start = time.time()
    rows = []
    names = [s for s in args.suite.split(",") if s]
    for name in names:
        if name not in suites.SUITES:
            p.error(f"unknown suite {name!r}; choose from {', '.join(suites.SUITES)}")
    for name in names:
        kwargs = {}
        if name.startswith("gemm") and args.shapes:
            kwargs["shapes"] = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
        for row in suites.SUITES[name](
                lambda what: print(f"  [{time.time() - start:6.1f}s] {name}: {what}",
                                   file=sys.stderr, flush=True), **kwargs):
            rows.append(row)
            print(report.row_line(row), flush=True)
    os.makedirs(args.out, exist_ok=True)
    from .timing import METHOD

    timing_note = f"{METHOD['name']} time per op, protocol {args.protocol}"
    print(f"\ntiming: {timing_note} (see jax_fp8gemm/bench/timing.py)")
    print(report.table(rows, jax.devices()[0].device_kind))
    report.write(rows, args.out, jax.devices()[0].device_kind, timing_note)
    print(f"\nwrote {args.out}/results.json and {args.out}/results.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
