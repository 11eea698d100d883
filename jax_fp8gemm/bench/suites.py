"""What the benchmark measures: each suite yields cases, each case our op and its peers.

A case is a dict: suite, case (shape text), metric ("TFLOP/s" or "GB/s"), ours (the name of our
entry), and results {implementation: value or an "n/a: why" string}.
"""

from __future__ import annotations

import functools
from typing import Callable, Iterator, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import jax_fp8gemm as fg
from jax_fp8gemm import reference

from .timing import sets_needed, time_jax, time_torch

Progress = Callable[[str], None]

GEMM_SHAPES = [
    (4096, 7168, 16384), (8192, 8192, 8192), (4096, 4096, 7168), (4096, 2112, 7168),
    (4096, 24576, 1536), (4096, 7168, 2048), (4096, 32768, 512),
    (128, 7168, 16384), (128, 4096, 7168), (64, 2112, 7168),
]
QUANT_CASES = [  # (kind, shape, dtype)
    ("rowwise", (8192, 7168), jnp.bfloat16), ("rowwise", (16384, 16384), jnp.bfloat16),
    ("rowwise", (8192, 7168), jnp.float32), ("blockwise", (7168, 16384), jnp.bfloat16),
    ("blockwise", (16384, 16384), jnp.bfloat16),
    # fused quantize + transpose (both orientations in one pass), as training uses them
    ("rowwise+T", (8192, 7168), jnp.bfloat16), ("rowwise+T", (16384, 16384), jnp.bfloat16),
    ("rowwise+T", (8200, 7168), jnp.bfloat16),  # a token count off 16: qt rows not 16-byte aligned
    ("rowwise+T align 128", (8200, 7168), jnp.bfloat16),  # the same, qt rows padded as training does
    ("blockwise+T", (7168, 16384), jnp.bfloat16),
    # with gelu fused (fp8_mlp's hidden layer, d_ff 14336 x 8192 tokens): forward and gradient
    ("rowwise+T gelu", (8192, 14336), jnp.bfloat16), ("rowwise+T gelu grad", (8192, 14336), jnp.bfloat16),
    ("rowwise+T gelu", (8200, 14336), jnp.bfloat16),  # off 16 without align: sectors shared by 2 SMs
    ("rowwise+T gelu align 128", (8200, 14336), jnp.bfloat16),  # as fp8_mlp writes it
]


class _QuantOp(NamedTuple):
    ours: Callable
    reference: Callable                # the jnp reference (run by XLA)
    unfused: Callable | None = None    # ours without the fusion, and what does the rest
    unfused_by: str = "XLA transpose"
    inputs: int = 1                    # tensors read (x; g and u for the gelu gradient)


_QUANT_OPS = {
    "rowwise": _QuantOp(fg.quantize_rowwise, reference.quantize_rowwise),
    "blockwise": _QuantOp(fg.quantize_blockwise, reference.quantize_blockwise),
    "rowwise+T": _QuantOp(fg.quantize_rowwise_transpose, reference.quantize_rowwise_transpose,
                          lambda x: (*fg.quantize_rowwise(x), *fg.quantize_rowwise(x.T))),
    # qt's rows (the token axis) zero-padded to whole 128-byte lines, as the training paths ask
    "rowwise+T align 128": _QuantOp(lambda x: fg.quantize_rowwise_transpose(x, align=128),
                                    lambda x: reference.quantize_rowwise_transpose(x, False, 128)),
    "blockwise+T": _QuantOp(fg.quantize_blockwise_transpose, reference.quantize_blockwise_transpose,
                            lambda x: (*fg.quantize_blockwise(x), *fg.quantize_blockwise(x.T))),
    # unfused: XLA's activation (one fusion), then the fused quantize + transpose
    "rowwise+T gelu": _QuantOp(
        lambda u: fg.quantize_rowwise_transpose(u, activation="gelu"),
        lambda u: reference.quantize_rowwise_transpose(reference.activate(u, "gelu")),
        lambda u: fg.quantize_rowwise_transpose(reference.activate(u, "gelu")), "XLA gelu"),
    "rowwise+T gelu align 128": _QuantOp(
        lambda u: fg.quantize_rowwise_transpose(u, activation="gelu", align=128),
        lambda u: reference.quantize_rowwise_transpose(reference.activate(u, "gelu"), False, 128),
        lambda u: fg.quantize_rowwise_transpose(reference.activate(u, "gelu"), align=128), "XLA gelu"),
    "rowwise+T gelu grad": _QuantOp(
        lambda g, u: fg.quantize_rowwise_transpose_act_grad(g, u, "gelu"),
        lambda g, u: reference.quantize_rowwise_transpose(reference.activation_grad(g, u, "gelu")),
        lambda g, u: fg.quantize_rowwise_transpose(reference.activation_grad(g, u, "gelu")), "XLA gelu",
        inputs=2),
}


def _torch():
    try:
        import torch

        return torch if torch.cuda.is_available() else None
    except Exception:  # torch absent or broken: the torch peers are reported n/a
        return None


def _measure(results: dict, name: str, progress: Progress, fn: Callable[[], float], work: float):
    progress(name)
    try:
        results[name] = work / fn()
    except Exception as e:  # a peer that refuses a shape is a result, not a crash
        results[name] = f"n/a: {type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
    finally:
        torch = _torch()
        if torch is not None:  # hand torch's cached blocks back, or JAX runs out of memory later
            torch.cuda.empty_cache()


@functools.partial(jax.jit, static_argnums=(1, 2))
def _randn(key, shape, dtype):
    # Jitted so the float32 draw fuses into the cast: a 15 GB bf16 weight never needs 30 GB.
    return jax.random.normal(key, shape, jnp.float32).astype(dtype)


def quantize_suite(progress: Progress) -> Iterator[dict]:
    torch = _torch()
    for kind, shape, dtype in QUANT_CASES:
        n_elem = int(np.prod(shape))
        itemsize = jnp.dtype(dtype).itemsize
        scales = n_elem // 128 if kind.startswith("rowwise") else n_elem // (128 * 128)
        copies = 2 if "+T" in kind else 1
        op = _QUANT_OPS[kind]
        inputs = op.inputs
        moved = inputs * n_elem * itemsize + copies * (n_elem + scales * 4)  # read x, write q(t) and s(t)
        reps = sets_needed(inputs * n_elem * itemsize, min_reps=4, max_reps=16)
        keys = jax.random.split(jax.random.key(0), reps * inputs)
        sets = [tuple(_randn(keys[inputs * i + j], shape, dtype) for j in range(inputs)) for i in range(reps)]
        res: dict = {}
        gb = 1e9
        _measure(res, "ours", progress, lambda: time_jax(op.ours, sets), moved / gb)
        # The quantize kernel alone: the op standalone also runs XLA's transposes that hand the
        # MN-major row-wise scales on in the usual layout (inside a jit that feeds a GEMM, XLA
        # cancels them against the GEMM's); SPEC's bar is on the kernels.
        _measure(res, "ours, quantize kernel only", progress,
                 lambda: time_jax(op.ours, sets, only="quantize"), moved / gb)
        if op.unfused is not None:
            _measure(res, f"ours unfused ({op.unfused_by})", progress,
                     lambda: time_jax(op.unfused, sets), moved / gb)
        _measure(res, "XLA jnp quantize", progress, lambda: time_jax(op.reference, sets), moved / gb)
        copy_bytes = 2 * n_elem * itemsize
        _measure(res, "XLA copy (elementwise)", progress,
                 lambda: time_jax(lambda x, *_: -x, sets), copy_bytes / gb)
        if torch is not None:
            tdt = {jnp.bfloat16: torch.bfloat16, jnp.float32: torch.float32}[dtype]
            tsets = [(torch.randn(shape, device="cuda", dtype=tdt),
                      torch.empty(shape, device="cuda", dtype=tdt)) for _ in range(reps)]
            _measure(res, "torch copy_", progress,
                     lambda: time_torch(lambda s, d: d.copy_(s), tsets), copy_bytes / gb)
            del tsets
        del sets
        yield {"suite": "quantize", "case": f"{kind} {'x'.join(map(str, shape))} "
               f"{jnp.dtype(dtype).name}", "metric": "GB/s", "ours": "ours",
               "baseline": ["XLA copy (elementwise)", "torch copy_"], "results": res}


def _bf16_dequant_dot(a, a_s, b, b_s):
    """What a JAX user writes today: dequantize to bf16, then a bf16 dot."""
    x = (fg.reference.dequantize_rowwise(a, a_s)).astype(jnp.bfloat16)
    w = (fg.reference.dequantize_blockwise(b, b_s)).astype(jnp.bfloat16)
    return jax.lax.dot_general(x, w, (((1,), (1,)), ((), ())))


def _per_tensor_fp8(a, sa, b, sb):
    """XLA's cuBLASLt FP8 path: f8 x f8 with scalar scales (no fine-grained scaling)."""
    out = jax.lax.dot_general(a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    return (out * (sa * sb)).astype(jnp.bfloat16)


def _config_name(cfg) -> str:
    """A configuration's tile and cluster: 256x128/mc2A (CTA pairs sharing A), 128x128/mc1,
    128x64/ks2 (split over K by two CTAs)..."""
    cluster = f"ks{cfg.k_splits}" if cfg.k_splits > 1 else f"mc{cfg.multicast}{'A' if cfg.multicast_a else ''}"
    return f"{cfg.block_m}x{cfg.block_n}/{cluster}"


def gemm_sweep_suite(progress: Progress, shapes=GEMM_SHAPES) -> Iterator[dict]:
    """Every compiled tile x multicast on every shape: the measured table behind gemm_config."""
    from jax_fp8gemm import _kernels, gemm_config
    from jax_fp8gemm.gemm import gemm_kernel_call

    for m, n, k in shapes:
        reps = sets_needed(m * k + n * k, min_reps=4, max_reps=32)
        keys = jax.random.split(jax.random.key(2), 2 * reps)
        q = [(*fg.quantize_rowwise(_randn(keys[2 * i], (m, k), jnp.bfloat16)),
              *fg.quantize_blockwise(_randn(keys[2 * i + 1], (n, k), jnp.bfloat16)))
             for i in range(reps)]
        picked = gemm_config.pick(m, n, k, jnp.bfloat16, _kernels.num_sms(), _kernels.max_active_split_k_clusters)
        candidates = [(name, cfg) for name, cfg in (("gemv", gemm_config.GEMV), ("gemv mma", gemm_config.GEMV_MMA))
                      if m <= cfg.block_m]
        for bm, bn in gemm_config.COMPILED_TILES:
            if m <= 64 and bm > 64:
                continue
            # Clusters: multicast pairs (none, sharing B, sharing A); SPLIT_K_TILES also split-K.
            splits = range(2, gemm_config.MAX_K_SPLITS + 1) if (bm, bn) in gemm_config.SPLIT_K_TILES else ()
            for mc, mc_a, ks in [(1, 0, 1), (2, 0, 1), (2, 1, 1)] + [(1, 0, ks) for ks in splits]:
                cfg = gemm_config.GemmConfig(bm, bn, 0, _kernels.num_sms(), mc, mc_a, ks)
                candidates.append((_config_name(cfg), cfg))
        res: dict = {}
        for name, cfg in candidates:
            _measure(res, name, progress, lambda: time_jax(
                lambda a, a_s, b, b_s: gemm_kernel_call(a, a_s, b, b_s, cfg), q), 2.0 * m * n * k / 1e12)
        ours = next(name for name, cfg in candidates if cfg == picked)
        yield {"suite": "gemm-sweep", "case": f"{m}x{n}x{k} (picked: {ours})", "metric": "TFLOP/s",
               "ours": ours, "results": res}


def _scales_in_kernel_layout(a_s: jax.Array) -> jax.Array:
    """A's row-wise scales [..., Kb] stored as our quantizers hand them to the GEMMs inside one jit:
    MN-major, [Kb, rows] (a materialized copy). The timed call views them as [..., Kb] again
    (`_scales_viewed_row_wise`), a transpose XLA cancels against the GEMM's own, as it does for a
    quantizer's output (tests/test_gpu.py checks the HLO). Scales from outside the jit in the
    public row-wise layout would cost an XLA transpose per call instead (~1.3 us, a tenth of a
    decode GEMM): a cost a jitted model that quantizes its activations never pays, and one torch's
    `_scaled_mm` peer is spared too (it takes its scales in this layout already)."""
    return jnp.asarray(a_s.reshape(-1, a_s.shape[-1]).T)


def _scales_viewed_row_wise(s_mn: jax.Array, shape) -> jax.Array:
    return s_mn.T.reshape(shape)


def gemm_suite(progress: Progress, shapes=GEMM_SHAPES) -> Iterator[dict]:
    torch = _torch()
    for m, n, k in shapes:
        flops = 2.0 * m * n * k
        reps = sets_needed(m * k + n * k, min_reps=4, max_reps=32)
        keys = jax.random.split(jax.random.key(1), 2 * reps)
        xs = [_randn(keys[2 * i], (m, k), jnp.bfloat16) for i in range(reps)]
        ws = [_randn(keys[2 * i + 1], (n, k), jnp.bfloat16) for i in range(reps)]
        q = [(*fg.quantize_rowwise(x), *fg.quantize_blockwise(w)) for x, w in zip(xs, ws)]
        q_mn = [(a, _scales_in_kernel_layout(a_s), b, b_s) for a, a_s, b, b_s in q]
        res: dict = {}
        tf = 1e12
        _measure(res, "ours", progress, lambda: time_jax(
            lambda a, s, b, b_s: fg.gemm(a, _scales_viewed_row_wise(s, (m, -1)), b, b_s), q_mn),
            flops / tf)
        del q_mn
        _measure(res, "XLA bf16 dot", progress, lambda: time_jax(
            lambda x, w: jax.lax.dot_general(x, w, (((1,), (1,)), ((), ()))),
            list(zip(xs, ws))), flops / tf)
        _measure(res, "XLA dequant+dot", progress, lambda: time_jax(_bf16_dequant_dot, q),
                 flops / tf)
        scalar = jnp.float32(0.5)
        _measure(res, "XLA FP8 per-tensor", progress, lambda: time_jax(
            _per_tensor_fp8, [(s[0], scalar, s[2], scalar) for s in q]), flops / tf)
        del xs, ws
        if torch is not None:
            _measure(res, "torch _scaled_mm blockwise", progress,
                     lambda: _time_torch_scaled_mm(torch, m, n, k, reps), flops / tf)
        del q
        yield {"suite": "gemm", "case": f"{m}x{n}x{k}", "metric": "TFLOP/s", "ours": "ours",
               "baseline": ["XLA bf16 dot", "XLA FP8 per-tensor", "torch _scaled_mm blockwise"],
               "bytes": m * k + n * k + 2 * m * n, "results": res}


def _time_torch_scaled_mm(torch, m, n, k, reps):
    """cuBLASLt's own 1x128 / 128x128 FP8 GEMM through torch (strict scale layouts)."""
    sets = []
    for _ in range(reps):
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        # torch checks (a, scale_a) as 1x128: [M, K/128] with strides (1, M); and (b.T, scale_b.T)
        # as 128x128: scale_b.T [N/128, K/128] row-major, i.e. scale_b [K/128, N/128] strides (1, K/128).
        sa = torch.rand(k // 128, m, device="cuda").t()
        sb = torch.rand(n // 128, k // 128, device="cuda").t()
        sets.append((a, b.t(), sa, sb))
    fn = lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    return time_torch(fn, sets)


def _group_sizes(total: int, groups: int, uneven: bool, rng) -> np.ndarray:
    """Even split, or +-30% random sizes with about one group in eight empty (same total)."""
    if not uneven:
        return np.full(groups, total // groups, np.int32)
    w = rng.uniform(0.7, 1.3, groups)
    w[rng.random(groups) < 0.125] = 0.0
    sizes = np.floor(w / w.sum() * total).astype(np.int32)
    sizes[np.argmax(sizes)] += total - sizes.sum()
    return sizes


GROUPED_CASES = [  # (groups, rows per group, N, K, uneven)
    (8, 4096, 4096, 7168, False), (8, 4096, 4096, 7168, True), (4, 8192, 7168, 2048, False),
    (4, 8192, 4096, 7168, False), (32, 256, 4096, 7168, False), (32, 256, 4096, 7168, True),
    (256, 1024, 4096, 7168, False), (256, 1024, 4096, 7168, True),
]
MASKED_CASES = [(1, 1024, 4096, 7168), (2, 512, 4096, 7168), (4, 256, 4096, 7168),
                (1, 1024, 7168, 2048), (4, 256, 7168, 2048)]


def grouped_case_sizes() -> list[np.ndarray]:
    """The group sizes of each GROUPED_CASES entry as the grouped suite runs them (one generator,
    seeded 0, drawn in order; tools/deepgemm_peer.sh hands the same uneven sizes to DeepGEMM)."""
    rng = np.random.default_rng(0)
    return [_group_sizes(g * rows, g, uneven, rng) for g, rows, _, _, uneven in GROUPED_CASES]


def grouped_suite(progress: Progress) -> Iterator[dict]:
    """Contiguous grouped GEMM (unpadded group sizes) against ragged_dot and torch._grouped_mm."""
    torch = _torch()
    for (g, rows, n, k, uneven), group_sizes in zip(GROUPED_CASES, grouped_case_sizes()):
        m = g * rows
        sizes = jnp.asarray(group_sizes)
        flops = 2.0 * m * n * k / 1e12
        reps = 2 if g * n * k * 2 < 8e9 else 1  # 256 experts: one 15 GB weight set, no second
        keys = jax.random.split(jax.random.key(3), 2 * reps)
        xs = [_randn(keys[2 * i], (m, k), jnp.bfloat16) for i in range(reps)]
        ws = [_randn(keys[2 * i + 1], (g, n, k), jnp.bfloat16) for i in range(reps)]
        res: dict = {}
        q = []
        for x, w in zip(xs, ws):
            a, a_s = fg.quantize_rowwise(x)
            q.append((a, _scales_in_kernel_layout(a_s), *fg.quantize_blockwise(w), sizes))
        _measure(res, "ours", progress, lambda: time_jax(
            lambda a, s, b, b_s, gs: fg.grouped_gemm(a, _scales_viewed_row_wise(s, (m, -1)), b, b_s, gs),
            q), flops)
        del q
        _measure(res, "jax.lax.ragged_dot bf16", progress, lambda: time_jax(
            lambda x, w, gs: jax.lax.ragged_dot(x, jnp.swapaxes(w, 1, 2), gs),
            [(x, w, sizes) for x, w in zip(xs, ws)]), flops)
        del xs, ws
        if torch is not None:
            _measure(res, "torch _grouped_mm bf16", progress,
                     lambda: _time_torch_grouped(torch, np.asarray(sizes), n, k, reps), flops)
        yield {"suite": "grouped", "case": f"{g}x{rows}{' uneven' if uneven else ''} N{n} K{k}",
               "metric": "TFLOP/s", "ours": "ours", "results": res}
    for g, rows, n, k in MASKED_CASES:
        flops = 2.0 * g * rows * n * k / 1e12
        keys = jax.random.split(jax.random.key(4), 4)
        sets = []
        for i in range(2):
            a, a_s = fg.quantize_rowwise(_randn(keys[2 * i], (g, rows, k), jnp.bfloat16))
            b, b_s = fg.quantize_blockwise(_randn(keys[2 * i + 1], (g, n, k), jnp.bfloat16))
            sets.append((a, _scales_in_kernel_layout(a_s), b, b_s, jnp.full((g,), rows, jnp.int32)))
        res = {}
        _measure(res, "ours", progress, lambda: time_jax(
            lambda a, s, b, b_s, mm: fg.grouped_gemm_masked(
                a, _scales_viewed_row_wise(s, (g, rows, -1)), b, b_s, mm), sets), flops)
        bf = [(fg.dequantize_rowwise(s[0], _scales_viewed_row_wise(s[1], (g, rows, -1))).astype(jnp.bfloat16),
               fg.dequantize_blockwise(s[2], s[3]).astype(jnp.bfloat16)) for s in sets]
        _measure(res, "XLA bf16 batched dot", progress, lambda: time_jax(
            lambda x, w: jnp.einsum("gmk,gnk->gmn", x, w), bf), flops)
        yield {"suite": "grouped", "case": f"masked {g}x{rows} N{n} K{k}", "metric": "TFLOP/s",
               "ours": "ours", "results": res}


def _time_torch_grouped(torch, sizes, n, k, reps):
    """torch._grouped_mm in bf16 (no block-scaled FP8 grouped GEMM exists in torch on Hopper)."""
    offs = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device="cuda")
    m = int(sizes.sum())
    sets = [(torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
             torch.randn(len(sizes), n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1))
            for _ in range(reps)]
    return time_torch(lambda a, b: torch._grouped_mm(a, b, offs=offs), sets)


# tokens, K, N; the last off 32 everywhere (the quantizers pad each contracted axis as they write)
TRAIN_SHAPES = [(8192, 8192, 8192), (8192, 4096, 14336), (8192, 14336, 4096), (8200, 4104, 4104)]
# (experts, mean tokens per expert, K, N): 32 experts' up-projection at DeepSeek-V3's widths
TRAIN_RAGGED_SHAPES = [(32, 1024, 7168, 2048)]


def fwd_bwd(dot):
    """One linear layer's forward and backward with `dot` (x [T, K] @ w [K, N], cotangent dy):
    (y, dx, dw)."""
    def run(x, w, dy):
        y, vjp = jax.vjp(dot, x, w)
        return y, *vjp(dy.astype(y.dtype))
    return run


def train_suite(progress: Progress) -> Iterator[dict]:
    """Forward + backward of one linear layer, quantization included: fg.fp8_dot against the bf16
    dot of the same shapes (3 GEMMs each: forward, dgrad, wgrad); and of an MoE layer's experts,
    fg.ragged_dot against jax.lax.ragged_dot."""
    for m, k, n in TRAIN_SHAPES:
        flops = 3 * 2.0 * m * n * k / 1e12
        keys = jax.random.split(jax.random.key(5), 6)
        sets = [(_randn(keys[3 * i], (m, k), jnp.bfloat16),
                 _randn(keys[3 * i + 1], (k, n), jnp.bfloat16),
                 _randn(keys[3 * i + 2], (m, n), jnp.bfloat16)) for i in range(2)]

        res: dict = {}
        _measure(res, "ours (fp8_dot)", progress, lambda: time_jax(fwd_bwd(fg.fp8_dot), sets), flops)
        _measure(res, "XLA bf16 dot", progress, lambda: time_jax(fwd_bwd(jnp.dot), sets), flops)
        yield {"suite": "train", "case": f"fwd+bwd tokens{m} K{k} N{n}", "metric": "TFLOP/s",
               "ours": "ours (fp8_dot)", "results": res}
    # An MoE layer's expert GEMM: fg.ragged_dot against jax.lax.ragged_dot, forward + backward,
    # uneven unpadded group sizes (same total).
    for g, rows, k, n in TRAIN_RAGGED_SHAPES:
        m = g * rows
        flops = 3 * 2.0 * m * n * k / 1e12
        sizes = jnp.asarray(_group_sizes(m, g, True, np.random.default_rng(2)))
        keys = jax.random.split(jax.random.key(8), 6)
        sets = [(_randn(keys[3 * i], (m, k), jnp.bfloat16), _randn(keys[3 * i + 1], (g, k, n), jnp.bfloat16),
                 _randn(keys[3 * i + 2], (m, n), jnp.bfloat16)) for i in range(2)]

        def ragged(dot):
            return lambda x, w, dy: fwd_bwd(lambda x, w: dot(x, w, sizes))(x, w, dy)

        res = {}
        _measure(res, "ours (ragged_dot)", progress, lambda: time_jax(ragged(fg.ragged_dot), sets), flops)
        _measure(res, "jax.lax.ragged_dot bf16", progress, lambda: time_jax(ragged(jax.lax.ragged_dot), sets),
                 flops)
        yield {"suite": "train", "case": f"ragged fwd+bwd {g} experts x ~{rows} tokens K{k} N{n}",
               "metric": "TFLOP/s", "ours": "ours (ragged_dot)", "results": res}
        del sets
    # Forward only (an evaluation / inference step on bf16 weights): both operands quantized per
    # call, the weight from its [K, N] layout in one pass.
    m, k, n = TRAIN_SHAPES[0]
    keys = jax.random.split(jax.random.key(7), 4)
    sets = [(_randn(keys[2 * i], (m, k), jnp.bfloat16), _randn(keys[2 * i + 1], (k, n), jnp.bfloat16))
            for i in range(2)]
    res = {}
    _measure(res, "ours (fp8_dot)", progress, lambda: time_jax(fg.fp8_dot, sets), 2.0 * m * n * k / 1e12)
    _measure(res, "XLA bf16 dot", progress, lambda: time_jax(jnp.dot, sets), 2.0 * m * n * k / 1e12)
    yield {"suite": "train", "case": f"forward only tokens{m} K{k} N{n}", "metric": "TFLOP/s",
           "ours": "ours (fp8_dot)", "results": res}


WGRAD_CASES = [  # (groups, tokens per group, M, N): weight gradients [G,] M x N over the tokens
    (1, 8192, 7168, 7168), (1, 8192, 4096, 7168), (8, 4096, 4096, 7168),
    (32, 1024, 7168, 2048)]  # 32 experts' up-projection (DeepSeek-V3 widths)


def wgrad_suite(progress: Progress) -> Iterator[dict]:
    """Weight-gradient GEMMs (1x128 scales along the token axis on both operands): fg.gemm_wgrad /
    fg.grouped_gemm_wgrad against XLA's bf16 dot of the same x^T @ dy (per group, as one batched
    dot of the even groups). The k-grouped op also with uneven unpadded sizes (same total; the
    group boundaries inside 128-token blocks, as a router leaves them), against what a JAX user
    has for those: the weight gradient of jax.lax.ragged_dot (its vjp, bf16), and torch's
    k-grouped torch._grouped_mm (bf16; it needs sizes that are multiples of 8 tokens, so it gets
    the sizes rounded to 16). FP32 out, and bf16 out (what a bf16 weight's gradient gets; XLA's
    dot then rounds its output to bf16 too)."""
    torch = _torch()
    for g, tokens, m, n in WGRAD_CASES:
        t = g * tokens
        flops = 2.0 * m * n * t / 1e12
        keys = jax.random.split(jax.random.key(6), 4)
        xs = [_randn(keys[2 * i], (t, m), jnp.bfloat16) for i in range(2)]
        dys = [_randn(keys[2 * i + 1], (t, n), jnp.bfloat16) for i in range(2)]
        sizes = jnp.full((g,), tokens, jnp.int32)
        # Unpadded uneven sizes (same total): group boundaries inside 128-token blocks.
        uneven = jnp.asarray(_group_sizes(t, g, True, np.random.default_rng(1)))
        # The operands as training hands them to the kernel: x^T and dy^T in 1x128 groups along T.
        q = [(*fg.quantize_rowwise(x.T), *fg.quantize_rowwise(dy.T)) for x, dy in zip(xs, dys)]
        kind = "dense" if g == 1 else f"k-grouped {g}x{tokens} tokens"
        for out in (jnp.float32, jnp.bfloat16):
            suffix = "" if out == jnp.float32 else " bf16 out"
            res: dict = {}
            if g == 1:
                ours = functools.partial(fg.gemm_wgrad, out_dtype=out)
                _measure(res, "ours", progress, lambda: time_jax(ours, q), flops)
                _measure(res, "XLA bf16 dot", progress, lambda: time_jax(
                    lambda x, dy: jax.lax.dot_general(x, dy, (((0,), (0,)), ((), ())), preferred_element_type=out),
                    list(zip(xs, dys))), flops)
            else:
                ours = functools.partial(fg.grouped_gemm_wgrad, out_dtype=out)
                _measure(res, "ours", progress, lambda: time_jax(ours, [(*args, sizes) for args in q]), flops)
                uneven_res: dict = {}
                _measure(uneven_res, "ours", progress, lambda: time_jax(ours, [(*args, uneven) for args in q]),
                         flops)
                _measure(uneven_res, "jax.lax.ragged_dot bf16 (vjp)", progress, lambda: time_jax(
                    _ragged_dot_wgrad, [(x, dy, uneven) for x, dy in zip(xs, dys)]), flops)
                if torch is not None:
                    _measure(uneven_res, "torch _grouped_mm bf16", progress,
                             lambda: _time_torch_k_grouped(torch, np.asarray(uneven), m, n, out), flops)
                _measure(res, "XLA bf16 batched dot", progress, lambda: time_jax(
                    lambda x, dy: jnp.einsum("gtm,gtn->gmn", x.reshape(g, tokens, m), dy.reshape(g, tokens, n),
                                             preferred_element_type=out), list(zip(xs, dys))), flops)
            yield {"suite": "wgrad", "case": f"{kind} M{m} N{n} T{t}{suffix}", "metric": "TFLOP/s",
                   "ours": "ours", "results": res}
            if g > 1:
                yield {"suite": "wgrad", "case": f"{kind} uneven M{m} N{n} T{t}{suffix}", "metric": "TFLOP/s",
                       "ours": "ours", "results": uneven_res}
        del q, xs, dys


# The k-grouped wgrad's tile crossover: k-blocks per group (128 tokens each) of ~32768 tokens in
# MoE-like sizes, at an up- and a down-projection's M x N (DeepSeek-V3 widths).
WGRAD_SWEEP_K_BLOCKS = (6, 8, 10, 12, 14, 16, 20)
WGRAD_SWEEP_SHAPES = ((7168, 2048), (2048, 7168))
WGRAD_SWEEP_TOKENS = 32768


def wgrad_sweep_suite(progress: Progress) -> Iterator[dict]:
    """The k-grouped wgrad's 256-row tiles, each as pick_wgrad runs it (256x128 in CTA pairs,
    256x96 with the scale products on the tensor cores), on MoE-like sizes of 6-20 k-blocks per
    group, f32 and bf16 out: the measured table behind gemm_config._SCALE_MMA_SHORT_K_BLOCKS.
    Which one wins near the threshold depends on the clock: compare under `--protocol settled`
    (a long run's power-capped clock) too."""
    from jax_fp8gemm import _kernels, gemm_config, wgrad

    num_sms = _kernels.num_sms()
    for out in (jnp.bfloat16, jnp.float32):
        suffix = " bf16 out" if out == jnp.bfloat16 else ""
        for m, n in WGRAD_SWEEP_SHAPES:
            keys = jax.random.split(jax.random.key(8), 4)
            for kb in WGRAD_SWEEP_K_BLOCKS:
                g = WGRAD_SWEEP_TOKENS // (128 * kb)
                t = g * 128 * kb
                sizes = jnp.asarray(_group_sizes(t, g, True, np.random.default_rng(kb)))
                q = [(*fg.quantize_rowwise(_randn(keys[2 * i], (m, t), jnp.bfloat16)),
                      *fg.quantize_rowwise(_randn(keys[2 * i + 1], (n, t), jnp.bfloat16)), sizes)
                     for i in range(2)]
                pick = functools.partial(gemm_config.pick_wgrad, m, n, t, num_sms, g=g, k_grouped=True,
                                         out_dtype=out)
                res: dict = {}
                for cfg in (pick(tile=(256, 128)), pick(tile=(256, 96))):
                    _measure(res, _config_name(cfg), progress, lambda: time_jax(
                        lambda a, a_s, b, b_s, s: wgrad.grouped_gemm_wgrad_kernel_call(a, a_s, b, b_s, s, cfg, out),
                        q), 2.0 * m * n * t / 1e12)
                yield {"suite": "wgrad-sweep", "case": f"{g}x{128 * kb} ({kb} k-blocks) M{m} N{n}{suffix}",
                       "metric": "TFLOP/s", "ours": _config_name(pick()), "results": res}
                del q


def _ragged_dot_wgrad(x, dy, sizes):
    """The weight gradient of jax.lax.ragged_dot(x, w, sizes) (x [T, M], w [G, M, N]) for dy."""
    w = jnp.zeros((sizes.shape[0], x.shape[1], dy.shape[1]), x.dtype)
    _, vjp = jax.vjp(lambda w: jax.lax.ragged_dot(x, w, sizes), w)
    return vjp(dy)[0]


def sizes_in_multiples(sizes: np.ndarray, multiple: int) -> np.ndarray:
    """Group sizes rounded down to multiples of `multiple`, what that frees (rounded down too)
    added to the largest group: the same total where it is a multiple of `multiple`."""
    rounded = sizes // multiple * multiple
    rounded[np.argmax(rounded)] += (int(sizes.sum()) - int(rounded.sum())) // multiple * multiple
    return rounded


def _time_torch_k_grouped(torch, sizes, m, n, out):
    """torch._grouped_mm k-grouped (out[g] = a[:, group g] @ b[group g, :]), bf16 in; its sizes
    rounded to multiples of 16 tokens: torch asserts on the device that each group's bytes are a
    multiple of 16, which would end the process's CUDA context."""
    rounded = sizes_in_multiples(sizes, 16)
    offs = torch.tensor(np.cumsum(rounded), dtype=torch.int32, device="cuda")
    t = int(rounded.sum())
    dtype = {jnp.float32: torch.float32, jnp.bfloat16: torch.bfloat16}[out]
    sets = [(torch.randn(m, t, device="cuda", dtype=torch.bfloat16),
             torch.randn(n, t, device="cuda", dtype=torch.bfloat16).t()) for _ in range(2)]
    return time_torch(lambda a, b: torch._grouped_mm(a, b, offs=offs, out_dtype=dtype), sets)


SUITES = {"quantize": quantize_suite, "train": train_suite, "gemm": gemm_suite, "gemm-sweep": gemm_sweep_suite,
          "grouped": grouped_suite, "wgrad": wgrad_suite, "wgrad-sweep": wgrad_sweep_suite}
