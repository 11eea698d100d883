"""The compiled CUDA module: FFI registration at import and the "may we use the kernels" question.

The module `_cuda` exists only where the package was built with nvcc. The kernels are used when it
exists, every local GPU is a Hopper (compute capability 9.0) and JAX_FP8GEMM_KERNELS is not "0";
otherwise every op lowers to its jnp reference.
"""

from __future__ import annotations

import functools
import os
import warnings

import jax

try:
    from . import _cuda
except ImportError:  # built without nvcc: reference path only
    _cuda = None

# The XLA FFI targets the kernels are registered as (cuda/module.cc's registrations()).
TARGETS = (
    "fp8gemm_quantize_rowwise", "fp8gemm_quantize_blockwise", "fp8gemm_quantize_transpose",
    "fp8gemm_quantize_transpose_act_grad", "fp8gemm_gemm", "fp8gemm_grouped_gemm",
    "fp8gemm_grouped_gemm_masked", "fp8gemm_gemm_wgrad", "fp8gemm_grouped_gemm_wgrad",
)

if _cuda is not None:
    for _name, _capsule in _cuda.registrations().items():
        jax.ffi.register_ffi_target(_name, _capsule, platform="CUDA")


def extension_built() -> bool:
    return _cuda is not None


@functools.cache
def _hopper_devices() -> tuple:
    try:
        devices = jax.local_devices(backend="gpu")
    except RuntimeError:
        return ()
    if devices and all(getattr(d, "compute_capability", "") == "9.0" for d in devices):
        return tuple(devices)
    return ()


def kernels_enabled() -> bool:
    """True when ops lowered for CUDA run the sm_90a kernels."""
    if _cuda is None or os.environ.get("JAX_FP8GEMM_KERNELS", "1") == "0":
        return False
    return bool(_hopper_devices())


def num_sms() -> int:
    """Streaming multiprocessors of the (first) Hopper GPU: the persistent grid size."""
    devices = _hopper_devices()
    return int(getattr(devices[0], "core_count", 132)) if devices else 132


@functools.cache
def max_active_split_k_clusters(block_m: int, block_n: int, cluster_size: int) -> int:
    """Clusters of `cluster_size` CTAs of the dense block_m x block_n kernel that the (current) GPU
    holds at once (CUDA's occupancy query): the bound of a split-K grid (gemm_config.pick). 0
    without the extension."""
    return int(_cuda.max_active_split_k_clusters(block_m, block_n, cluster_size)) if _cuda is not None else 0


def export_disabled_checks() -> list:
    """`disabled_checks` for `jax.export.export` of a program that calls the kernels.

    jax.export refuses custom calls without a compatibility guarantee; these are ours. The exported
    module runs where this same version of jax_fp8gemm is imported (its FFI attributes are this
    version's), on a Hopper GPU, with the tile configurations picked for the GPU it was exported on.
    """
    return [jax.export.DisabledSafetyCheck.custom_call(name) for name in TARGETS]


@functools.cache
def warn_once(message: str) -> None:
    warnings.warn(f"jax_fp8gemm: {message}", RuntimeWarning, stacklevel=3)
