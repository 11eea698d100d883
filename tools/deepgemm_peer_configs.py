"""The configs DeepGEMM's SM90 heuristic picks for the peer's table (tools/deepgemm_peer.cu).

A transcription of DeepGEMM 54e2261's csrc/jit_kernels/heuristics/sm90.hpp for the 1D2D kernel
(FP8 e4m3 in, bf16 out, 132 SMs): get_layout_candidates (block sizes, clusters of at most two CTAs,
swizzle and stage limits), get_pipeline_config (stages that fit 232448 bytes) and get_layout_info
(modelled L1/L2 cycles over the wave efficiency; the first candidate wins ties). The contiguous
layout models its whole M with BLOCK_M = 128 (the layout's row alignment); the masked one G groups
of expected_m rows.

    python3 tools/deepgemm_peer_configs.py           # the X(...) rows of PEER_CONFIGS
    python3 tools/deepgemm_peer_configs.py --check   # exit 1 if deepgemm_peer.cu's rows differ
"""
from __future__ import annotations

import pathlib
import re
import sys

NUM_SMS, SMEM_CAPACITY, MAX_STAGES, BLOCK_K = 132, 232448, 16, 128

# (kind, G, M, N, K): M is all rows for dense and contiguous, rows per group (Mmax) for masked.
CASES = [
    ("kDense", 1, 4096, 7168, 16384), ("kDense", 1, 8192, 8192, 8192), ("kDense", 1, 4096, 4096, 7168),
    ("kDense", 1, 4096, 24576, 1536), ("kDense", 1, 4096, 7168, 2048), ("kDense", 1, 4096, 32768, 512),
    ("kDense", 1, 4096, 2112, 7168), ("kDense", 1, 128, 7168, 16384), ("kDense", 1, 128, 4096, 7168),
    ("kDense", 1, 64, 2112, 7168),
    ("kContiguous", 8, 32768, 4096, 7168), ("kContiguous", 4, 32768, 7168, 2048),
    ("kContiguous", 4, 32768, 4096, 7168), ("kContiguous", 32, 8192, 4096, 7168),
    ("kContiguous", 256, 262144, 4096, 7168),
    ("kMasked", 1, 1024, 4096, 7168), ("kMasked", 2, 512, 4096, 7168), ("kMasked", 4, 256, 4096, 7168),
    ("kMasked", 1, 1024, 7168, 2048), ("kMasked", 4, 256, 7168, 2048),
]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def stages(k: int, bm: int, bn: int) -> int:
    """get_pipeline_config: D staging, 16 stages' barriers and the B scales besides the stages."""
    extra = cdiv(bm * bn * 2, 1024) * 1024 + MAX_STAGES * 16 + cdiv(cdiv(k, BLOCK_K) * 4 * (1 if BLOCK_K % bn == 0 else 2), 8) * 8
    per_stage = bm * BLOCK_K + bn * BLOCK_K + cdiv(bm * 4, 128) * 128
    return min((SMEM_CAPACITY - extra) // per_stage, MAX_STAGES)


def pick(kind: str, g: int, m: int, n: int, k: int) -> tuple[int, int, int, int, int]:
    """(block_m, block_n, stages, cluster_m, cluster_n) of the cheapest candidate."""
    if kind == "kDense":
        block_ms = [64, 128] + ([16] if m <= 16 else []) + ([32] if m <= 32 else []) + [256]
        expected_m, groups = m, 1
    elif kind == "kContiguous":
        block_ms, expected_m, groups = [128], m, 1
    else:
        block_ms, expected_m, groups = [64, 128], m, g
    best = None
    for cluster_m in (1, 2):
        for cluster_n in (1, 2):
            cluster = cluster_m * cluster_n
            if cluster > 2 or NUM_SMS % cluster:
                continue
            for bm in block_ms:
                for bn in range(16, 193, 16):
                    if bn > BLOCK_K and bn % (bn - BLOCK_K) and BLOCK_K % (bn - BLOCK_K):
                        continue  # the 1D2D kernel's unrolling of two B-scale blocks
                    if kind == "kMasked" and cdiv(n, bn) % cluster:
                        continue
                    if bm > 128 and bn > 128:
                        continue
                    st = stages(k, bm, bn)
                    if st < 3 or (bm * bn < 128 * 192 and st < 4):
                        continue
                    blocks = cdiv(expected_m, bm) * cdiv(n, bn) * groups
                    waves = cdiv(blocks, NUM_SMS)
                    l2_bytes = k * (bm // cluster_n + bn // cluster_m) + bm * bn * 2
                    l1_bytes = k * (bm + bn) + k * (max(64, bm) + bn) + bm * bn * 2 + bm * bn * 2
                    l2_cycles = l2_bytes * blocks // int(min(64.0 * NUM_SMS, 8e6 / 1.3e3))
                    l1_cycles = l1_bytes * blocks // (128 * NUM_SMS)
                    cycles = int(max(l1_cycles, l2_cycles) / (blocks / (waves * NUM_SMS)))
                    if cluster > 1 and waves <= 1:
                        cycles = 2**63 - 1
                    if best is None or cycles < best[0]:
                        best = (cycles, (bm, bn, st, cluster_m, cluster_n))
    return best[1]


def rows() -> list[str]:
    return [f"X({i}, {kind}, {g}, {m}, {n}, {k}, " + ", ".join(map(str, pick(kind, g, m, n, k))) + ")"
            for i, (kind, g, m, n, k) in enumerate(CASES)]


if __name__ == "__main__":
    want = rows()
    if "--check" in sys.argv[1:]:
        src = (pathlib.Path(__file__).parent / "deepgemm_peer.cu").read_text()
        have = [re.sub(r"\s+", " ", r) for r in re.findall(r"^\s*(X\(\d+,[^)]*\))", src, re.M)]
        if have != want:
            print("deepgemm_peer.cu's PEER_CONFIGS differ from DeepGEMM's picks:", *want, sep="\n  ")
            sys.exit(1)
        print(f"deepgemm_peer.cu: all {len(want)} rows are DeepGEMM's picks")
    else:
        print(*want, sep="\n")
