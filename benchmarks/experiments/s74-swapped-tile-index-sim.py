"""Host simulation of the swapped wide tile's data path (s74-swapped-wide-tiles.patch), one math
warpgroup: the wgmma m64nT accumulator layout with the N-block's B rows as M and the tile's rows as
N, the promotion's A-scale index, stmatrix.x4.trans into the 128-byte-swizzled staging atoms
(Epilogue::store_swapped, both 64-row halves), and store_rows_masked's read-back. Checks that D
[row, column] comes out where the row-major tile expects it. Run: python3 <this file>."""
import numpy as np


def simulate(T, k_blocks=2):
    rng = np.random.default_rng(T)
    bw = rng.standard_normal((k_blocks, 128, 8))   # B tile: N-block columns x (a slice of) K
    a = rng.standard_normal((k_blocks, 128, 8))    # the tile's rows x K
    sa, sb = rng.standard_normal((k_blocks, 128)), rng.standard_normal(k_blocks)
    ref = sum(sb[k] * sa[k][:, None] * (a[k] @ bw[k].T) for k in range(k_blocks))
    out = np.zeros((2, 128, 64))  # [wave][thread][register]
    for k in range(k_blocks):
        for tid in range(128):
            warp, lane = divmod(tid, 32)
            for wave in range(2):
                for i in range(T // 2):
                    j, e = divmod(i, 4)
                    n = 64 * wave + 16 * warp + lane // 4 + 8 * (e >= 2)   # accumulator row
                    row = 8 * j + 2 * (lane % 4) + (e & 1)                 # accumulator column
                    scale = sa[k][2 * (lane % 4) + 8 * (i // 4) + (i % 2)] * sb[k]  # the kernel's index
                    out[wave, tid, i] += (bw[k][n] @ a[k][row]) * scale
    d = np.full((128, 128), np.nan)
    for half in range(2 if T > 64 else 1):
        smem = {}
        for warp in range(4):
            for p in range(4):
                for wave in range(2):        # atom = wave
                    for m in range(4):       # stmatrix matrix m, stored row c from lane 8m + c
                        for c in range(8):
                            row = 8 * (m // 2) + c
                            col_bytes = (32 * warp + 16 * (m % 2)) ^ ((row & 7) << 4)
                            addr = wave * 64 * 128 + (row + 16 * p) * 128 + col_bytes
                            for r in range(8):  # fragment (r, c) of matrix m: lane 4r + c / 2
                                i = 32 * half + 8 * p + 2 * m + c % 2
                                smem[addr + 2 * r] = out[wave, 32 * warp + 4 * r + c // 2, i]
        for row in range(64):
            for chunk in range(16):
                base = (chunk // 8) * 64 * 128 + row * 128 + (((chunk % 8) * 16) ^ ((row & 7) << 4))
                for e in range(8):
                    d[64 * half + row, 8 * chunk + e] = smem[base + 2 * e]
    return np.abs(d[:T] - ref[:T]).max()


if __name__ == "__main__":
    for T in (16, 32, 48, 80, 96, 112):
        err = simulate(T)
        print(f"N = {T}: max error {err:.1e}")
        assert err < 1e-12
