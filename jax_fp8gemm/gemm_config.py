"""Per-shape configuration of the dense GEMM kernel, chosen at trace time from an analytic model.

The kernel is persistent: `num_sms` CTAs walk the output tiles. What matters is (1) the number of
waves, cdiv(tiles, num_sms), since a partly filled last wave costs a whole one, and (2) the work
per tile (bigger tiles re-read less of A and B). We pick the compiled (block_m, block_n) with the
fewest waves, then the largest tile, as DeepGEMM's heuristic does. COMPILED must mirror the
instantiations in cuda/gemm/fp8_gemm.cu.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .reference import cdiv

# (block_m, block_n) pairs compiled into the extension (cuda/gemm/fp8_gemm.cu).
COMPILED_BLOCK_M = (64, 128)
COMPILED_BLOCK_N = (64, 128, 160)


@dataclasses.dataclass(frozen=True)
class GemmConfig:
    block_m: int
    block_n: int
    num_stages: int  # 0: as many as fit in shared memory
    num_sms: int
    multicast: int  # 1, or 2 = TMA multicast over a cluster of two CTAs

    def attributes(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def pick(m: int, n: int, k: int, out_dtype, num_sms: int) -> GemmConfig:
    del k  # every K block costs the same per tile; K does not change the ranking
    block_ms = (64,) if m <= 64 else COMPILED_BLOCK_M
    best = None
    for bm in block_ms:
        for bn in COMPILED_BLOCK_N:
            tiles = cdiv(m, bm) * cdiv(n, bn)
            waves = cdiv(tiles, num_sms)
            # cost ~ waves x per-tile time; per-tile time ~ bm*bn MACs plus (bm+bn) loads per K.
            cost = waves * (bm * bn + 32 * (bm + bn))
            key = (cost, -bm * bn)
            if best is None or key < best[0]:
                best = (key, bm, bn)
    _, bm, bn = best
    tiles = cdiv(m, bm) * cdiv(n, bn)
    multicast = 2 if (m >= 1024 and cdiv(m, bm) % 2 == 0 and tiles >= num_sms) else 1
    del out_dtype
    return GemmConfig(block_m=bm, block_n=bn, num_stages=0, num_sms=int(num_sms),
                      multicast=multicast)
