"""The k-grouped wgrad kernel's input layout (wgrad._blocks_per_group), checked on any backend:
the kernel's math on the relaid tokens (each group a contiguous range of whole 128-token blocks,
one scale per row and block) must equal the reference on the original layout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_fp8gemm as fg
from jax_fp8gemm import reference, wgrad
from jax_fp8gemm.reference import GROUP


def _kernel_math(a, a_s, b, b_s, padded):
    """What the k-grouped kernel computes: group g over its blocks [kb_g, kb_g + size_g / 128)."""
    blocks = np.asarray(padded) // GROUP
    ends = np.cumsum(blocks)
    af = reference.dequantize_rowwise(a, a_s)
    bf = reference.dequantize_rowwise(b, b_s)
    outs = [jnp.einsum("mt,nt->mn", af[:, (e - k) * GROUP:e * GROUP], bf[:, (e - k) * GROUP:e * GROUP],
                       precision=jax.lax.Precision.HIGHEST) for k, e in zip(blocks, ends)]
    return jnp.stack(outs)


@pytest.mark.parametrize("m,n,t,sizes", [
    (8, 12, 400, [50, 0, 130, 100, 0]),   # groups straddle scale blocks, empty groups, unused tail
    (4, 8, 256, [256]),                   # G = 1
    (5, 4, 384, [0, 0]),                  # all empty
    (6, 4, 512, [-3, 700, 5]),            # clamped: negative, past T
    (3, 5, 144, [1, 1, 1, 100]),          # several groups inside one block
])
def test_blocks_per_group(m, n, t, sizes):
    x = jax.random.normal(jax.random.key(1), (m, t))
    y = jax.random.normal(jax.random.key(2), (n, t))
    a, a_s = fg.quantize_rowwise(x)
    b, b_s = fg.quantize_rowwise(y)
    gs = jnp.asarray(sizes, jnp.int32)
    ap, ap_s, bp, bp_s, padded = jax.jit(wgrad._blocks_per_group)(a, a_s, b, b_s, gs)
    assert ap.shape == (m, GROUP * (-(-t // GROUP) + len(sizes))) and ap_s.shape == (m, ap.shape[1] // GROUP)
    assert padded.dtype == jnp.int32 and np.all(np.asarray(padded) % GROUP == 0)
    assert int(np.sum(np.asarray(padded))) <= ap.shape[1]
    got = _kernel_math(ap, ap_s, bp, bp_s, padded)
    want = reference.grouped_gemm_wgrad(a, a_s, b, b_s, gs)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5,
                               atol=1e-5 * float(jnp.max(jnp.abs(want))))
