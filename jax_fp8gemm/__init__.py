"""jax_fp8gemm: block-scaled FP8 GEMMs for NVIDIA Hopper as JAX primitives.

    import jax_fp8gemm as fg
    a, a_s = fg.quantize_rowwise(x)      # activations, 1x128 groups
    b, b_s = fg.quantize_blockwise(w)    # weights [N, K], 128x128 blocks
    y = fg.gemm(a, a_s, b, b_s)          # x @ w.T in bf16, FP32 accumulation

On Hopper the ops run sm_90a CUDA kernels through XLA FFI; elsewhere the same math in jnp
(jax_fp8gemm.reference).
"""

from . import reference
from ._kernels import export_disabled_checks, extension_built, kernels_enabled
from .dot import dot_general, einsum, fp8_dot, ragged_dot
from .gemm import gemm
from .grouped import grouped_gemm, grouped_gemm_masked
from .mlp import fp8_mlp
from .quantize import (dequantize_blockwise, dequantize_rowwise, quantize_blockwise,
                       quantize_blockwise_transpose, quantize_blockwise_transposed, quantize_rowwise,
                       quantize_rowwise_transpose, quantize_rowwise_transpose_act_grad)
from .wgrad import gemm_wgrad, grouped_gemm_wgrad

__all__ = [
    "quantize_rowwise", "quantize_blockwise", "dequantize_rowwise", "dequantize_blockwise",
    "quantize_rowwise_transpose", "quantize_blockwise_transpose", "quantize_blockwise_transposed",
    "quantize_rowwise_transpose_act_grad",
    "gemm", "grouped_gemm", "grouped_gemm_masked", "gemm_wgrad", "grouped_gemm_wgrad",
    "fp8_dot", "fp8_mlp", "dot_general", "einsum", "ragged_dot", "reference", "extension_built",
    "kernels_enabled", "export_disabled_checks",
]
__version__ = "0.1.0"
