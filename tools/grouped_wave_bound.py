"""The share of the even case's speed that wgmma waves allow uneven group sizes (KERNEL_NOTES,
"Grouped GEMMs"): a group of s rows needs ceil(s / q) waves of q rows per N-block, so uneven sizes
cost sum(ceil(s_g / q)) waves where even ones cost G * ceil(rows / q). Printed for the grouped
suite's own sizes and over many draws of its size generator.

    python tools/grouped_wave_bound.py [--draws 200] [--swapped 65-112]

--swapped LO-HI adds a column for 64-row waves where a group's last 256-row M-block of LO..HI rows
runs swapped (tokens on the wgmma's N, in steps of 16: ceil(r / 16) / 4 waves), as
benchmarks/experiments/s74-swapped-wide-tiles-65-112.patch does.
"""
import argparse

import numpy as np

from jax_fp8gemm.bench.suites import GROUPED_CASES, _group_sizes, grouped_case_sizes

STEPS = (64, 32, 16)  # rows per wave: wgmma's least M; swapped tiles step the tokens by 16
TILE_ROWS = 256  # the grouped kernel's M-tile: 4 waves of 64 rows


def wave_bound(sizes: np.ndarray, rows: int, step: int, swapped: tuple[int, int] | None = None) -> float:
    sizes = sizes.astype(np.int64)
    waves = -(-sizes // step)
    if swapped is not None:  # 64-row waves but the swapped last M-blocks (module doc)
        rest = sizes % TILE_ROWS
        fine = (rest >= swapped[0]) & (rest <= swapped[1])
        waves = np.where(fine, sizes // TILE_ROWS * (TILE_ROWS // 64) + -(-rest // 16) / 4, waves)
    return len(sizes) * -(-rows // step) / waves.sum()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--draws", type=int, default=200, help="seeds 0..draws-1 of the size generator")
    p.add_argument("--swapped", default=None, metavar="LO-HI",
                   help="also 64-row waves with last M-blocks of LO..HI rows swapped (module doc)")
    args = p.parse_args()
    columns = [(step, None) for step in STEPS]
    if args.swapped:
        columns.append((64, tuple(int(v) for v in args.swapped.split("-"))))
    print("case, then for waves of " + " / ".join(map(str, STEPS)) + " rows"
          + (f" / 64 rows with {args.swapped} swapped" if args.swapped else "")
          + ": the suite's sizes | mean, 10th-90th percentile over the draws")
    for (g, rows, n, k, uneven), sizes in zip(GROUPED_CASES, grouped_case_sizes()):
        if not uneven:
            continue
        cols = []
        for step, swapped in columns:
            draws = np.array([wave_bound(_group_sizes(g * rows, g, True, np.random.default_rng(s)),
                                         rows, step, swapped) for s in range(args.draws)])
            lo, hi = np.percentile(draws, [10, 90])
            cols.append(f"{wave_bound(sizes, rows, step, swapped):.3f} | {draws.mean():.3f}, {lo:.3f}-{hi:.3f}")
        print(f"{g}x{rows} N{n} K{k}:  " + "   ".join(cols))


if __name__ == "__main__":
    main()
