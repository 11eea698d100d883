"""The grouped benchmark's group sizes (jax_fp8gemm/bench/suites.py: grouped_case_sizes), which
tools/deepgemm_peer.sh also hands to DeepGEMM's kernels: every case covers its rows exactly, even
cases split them equally, uneven ones have empty groups and non-empty ones within a factor 1.3 / 0.7
of each other (weights drawn in [0.7, 1.3]), and every call gives the same draw, one generator
across the cases."""

import numpy as np

from jax_fp8gemm.bench import suites


def test_grouped_case_sizes():
    drawn = suites.grouped_case_sizes()
    assert len(drawn) == len(suites.GROUPED_CASES)
    for (g, rows, _, _, uneven), sizes in zip(suites.GROUPED_CASES, drawn):
        assert sizes.shape == (g,) and sizes.dtype == np.int32
        assert sizes.sum() == g * rows and (sizes >= 0).all()
        if not uneven:
            assert (sizes == rows).all()
        else:
            nonempty = sizes[sizes > 0]
            assert len(nonempty) < g, "some groups are empty"
            # weights in [0.7, 1.3] scaled to the total: at most 1.3 / 0.7 apart (+1 row of rounding,
            # and the largest group takes the rounding remainder, under one row per group)
            assert nonempty.max() <= (1.3 / 0.7) * nonempty.min() + g


def test_grouped_case_sizes_are_one_draw():
    first, second = suites.grouped_case_sizes(), suites.grouped_case_sizes()
    assert all((a == b).all() for a, b in zip(first, second))
    uneven = [s for (_, _, _, _, u), s in zip(suites.GROUPED_CASES, first) if u]
    assert len(uneven) >= 2 and not any(np.array_equal(uneven[0][:8], u[:8]) for u in uneven[1:])


def test_sizes_in_multiples_keep_the_total():
    """torch's k-grouped _grouped_mm gets sizes in multiples of 16 tokens (its device-side assert
    would end the CUDA context): every size a multiple, none negative, the same total."""
    rng = np.random.default_rng(0)
    for g, total in ((8, 32768), (32, 32768), (256, 32768), (5, 4096)):
        sizes = suites._group_sizes(total, g, True, rng)
        rounded = suites.sizes_in_multiples(sizes, 16)
        assert (rounded % 16 == 0).all() and (rounded >= 0).all()
        assert rounded.sum() == total and np.abs(rounded - sizes).max() < 16 * g
