"""Small runs of every kernel-backed op, for compute-sanitizer (tools/gpu_check.sh).

    python tools/sanitize_small.py [quantize]   (quantize: the quantization kernels only, for racecheck)
"""

import itertools
import sys

import jax
import jax.numpy as jnp

import jax_fp8gemm as fg
from jax_fp8gemm import _kernels, gemm_config
from jax_fp8gemm.gemm import gemm_kernel_call
from jax_fp8gemm.wgrad import gemm_wgrad_kernel_call, grouped_gemm_wgrad_kernel_call

key = jax.random.key(0)
# (37, 130), (67, 131): rows loaded and stored as 8-, 4-byte words or bytes, as each allows
for shape in [(3, 200), (2, 130, 136), (5, 4), (37, 130), (67, 131)]:
    # align = 32: the FP8 outputs written zero-padded along their last axis
    for dtype, align in itertools.product((jnp.float32, jnp.bfloat16, jnp.float16), (1, 32)):
        x = jax.random.normal(key, shape, jnp.float32).astype(dtype)
        jax.block_until_ready(fg.quantize_rowwise(x, pow2_scale=True, align=align))
        jax.block_until_ready(fg.quantize_blockwise(x, align=align))
        if len(shape) > 1:  # partial tiles both ways, unaligned rows of the transposed output
            jax.block_until_ready(fg.quantize_rowwise_transpose(x, pow2_scale=True, align=align))
            jax.block_until_ready(fg.quantize_blockwise_transpose(x, align=align))
            jax.block_until_ready(fg.quantize.quantize_blockwise_transposed(x, align=align))
            # the fused activation variants (fp8_mlp's hidden layer)
            jax.block_until_ready(fg.quantize_rowwise_transpose(x, activation="gelu", align=align))
            jax.block_until_ready(fg.quantize_rowwise_transpose_act_grad(x, 2 * x, "gelu", align=align))
if sys.argv[1:] == ["quantize"]:
    # aligned paths; then more tiles than resident CTAs, so that the persistent fused activation
    # kernels run several tiles per CTA (partial tiles, a batch boundary, unaligned qt rows)
    for shape, align in itertools.product([(256, 384), (2, 1100, 2056), (2, 1000, 2040)], (1, 32)):
        x = jax.random.normal(key, shape, jnp.float32).astype(jnp.bfloat16)
        jax.block_until_ready(fg.quantize_rowwise_transpose(x, align=align))
        jax.block_until_ready(fg.quantize_blockwise_transpose(x, align=align))
        jax.block_until_ready(fg.quantize_rowwise_transpose(x, activation="gelu", align=align))
        jax.block_until_ready(fg.quantize_rowwise_transpose_act_grad(x, 2 * x, "gelu", align=align))
    print("sanitize_small: done")
    sys.exit(0)
for m, n, k in [(1, 16, 128), (7, 48, 400), (130, 264, 400), (64, 160, 144), (100, 72, 400)]:
    a, a_s = fg.quantize_rowwise(jax.random.normal(key, (m, k)))
    b, b_s = fg.quantize_blockwise(jax.random.normal(key, (n, k)))
    for out_dtype in (jnp.bfloat16, jnp.float32):
        jax.block_until_ready(fg.gemm(a, a_s, b, b_s, out_dtype=out_dtype))
    if m <= 4:  # the CUDA-core GEMM (picked only from K = 4096 on: gemm_config._pipeline_free)
        jax.block_until_ready(gemm_kernel_call(a, a_s, b, b_s, gemm_config.GEMV))
    if m <= 8:  # the same on mma.sync
        jax.block_until_ready(gemm_kernel_call(a, a_s, b, b_s, gemm_config.GEMV_MMA))
    if m <= 128:  # split-K decode tiles (K this short picks none): clusters exchanging partials
        for block_m, block_n, k_splits in ((64, 32, 2), (64, 32, 3), (64, 64, 4), (128, 32, 3), (128, 64, 2)):
            config = gemm_config.GemmConfig(block_m, block_n, 0, _kernels.num_sms(), 1, k_splits=k_splits)
            jax.block_until_ready(gemm_kernel_call(a, a_s, b, b_s, config))
sizes = jnp.asarray([50, 0, 70, 20], jnp.int32)  # sum 140 < M: tail rows zero
a, a_s = fg.quantize_rowwise(jax.random.normal(key, (150, 400)))
b, b_s = fg.quantize_blockwise(jax.random.normal(key, (4, 136, 400)))
am, am_s = fg.quantize_rowwise(jax.random.normal(key, (4, 70, 400)))
for out_dtype in (jnp.bfloat16, jnp.float32):
    jax.block_until_ready(fg.grouped_gemm(a, a_s, b, b_s, sizes, out_dtype=out_dtype))
    jax.block_until_ready(fg.grouped_gemm_masked(am, am_s, b, b_s, sizes, out_dtype=out_dtype))
# Weight gradients (FP32 and bf16 out): dense, and k-grouped with empty groups and a tail of unused
# tokens.
a, a_s = fg.quantize_rowwise(jax.random.normal(key, (136, 400)))
b, b_s = fg.quantize_rowwise(jax.random.normal(key, (72, 400)))
for out_dtype in (jnp.bfloat16, jnp.float32):
    jax.block_until_ready(fg.gemm_wgrad(a, a_s, b, b_s, out_dtype=out_dtype))
    jax.block_until_ready(fg.grouped_gemm_wgrad(a, a_s, b, b_s, jnp.asarray([150, 0, 100, 30], jnp.int32),
                                                out_dtype=out_dtype))
# The 256x96 wgrad tile (scale products on the tensor cores; B's scale operand made by XLA),
# partial tiles both ways; k-grouped too (uneven, empty groups, unused tail tokens).
a, a_s = fg.quantize_rowwise(jax.random.normal(key, (200, 400)))
b, b_s = fg.quantize_rowwise(jax.random.normal(key, (264, 400)))
tile_256x96 = gemm_config.GemmConfig(256, 96, 0, _kernels.num_sms(), 1)
for out_dtype in (jnp.bfloat16, jnp.float32):
    jax.block_until_ready(gemm_wgrad_kernel_call(a, a_s, b, b_s, tile_256x96, out_dtype))
    jax.block_until_ready(grouped_gemm_wgrad_kernel_call(a, a_s, b, b_s, jnp.asarray([150, 0, 100, 30], jnp.int32),
                                                         tile_256x96, out_dtype))
print("sanitize_small: done")
