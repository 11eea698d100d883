"""The benchmark command: `python -m jax_fp8gemm.bench --help`."""
