"""The CUDA lowerings of the ops, checked on any machine: lowered for CUDA with the kernels forced
on (no GPU and no extension needed: lowering only names the FFI targets), the training paths must
reach their kernels. Catches errors in the Python side of the kernel calls (argument plumbing,
shapes handed to jax.ffi.ffi_call) before a GPU ever runs them."""

import re
import warnings

import jax
import jax.numpy as jnp
import pytest

import jax_fp8gemm as fg
from jax_fp8gemm import _kernels


@pytest.fixture
def kernels_on(monkeypatch):
    monkeypatch.setattr(_kernels, "kernels_enabled", lambda: True)
    monkeypatch.setattr(_kernels, "num_sms", lambda: 132)


def cuda_targets(fn, *args):
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    return set(re.findall(r"@(fp8gemm_\w+)", text))


def _loss(f):
    return lambda *args: jnp.sum(f(*args).astype(jnp.float32))


X = jax.ShapeDtypeStruct((256, 512), jnp.bfloat16)
W1, W2 = jax.ShapeDtypeStruct((512, 1024), jnp.float32), jax.ShapeDtypeStruct((1024, 256), jnp.float32)
W3 = jax.ShapeDtypeStruct((2, 512, 256), jnp.float32)
SIZES = jax.ShapeDtypeStruct((2,), jnp.int32)
TRAINING = "fp8gemm_gemm fp8gemm_gemm_wgrad fp8gemm_quantize_transpose"


@pytest.mark.parametrize("name,fn,args,want", [
    ("fp8_dot", jax.grad(_loss(fg.fp8_dot), argnums=(0, 1)), (X, W1), TRAINING),
    ("fp8_mlp", jax.grad(_loss(fg.fp8_mlp), argnums=(0, 1, 2)), (X, W1, W2),
     TRAINING + " fp8gemm_quantize_transpose_act_grad"),
    ("fp8_mlp forward", fg.fp8_mlp, (X, W1, W2),
     "fp8gemm_gemm fp8gemm_quantize_rowwise fp8gemm_quantize_transpose"),
    ("ragged_dot", jax.grad(_loss(fg.ragged_dot), argnums=(0, 1)), (X, W3, SIZES),
     "fp8gemm_grouped_gemm fp8gemm_grouped_gemm_wgrad fp8gemm_quantize_transpose"),
    ("quantize_rowwise_transpose gelu", lambda x: fg.quantize_rowwise_transpose(x, activation="gelu"), (X,),
     "fp8gemm_quantize_transpose"),
    ("dot_general over two axes (nnx.LinearGeneral)",
     jax.grad(_loss(lambda x, w: fg.dot_general(x, w, (((1, 2), (0, 1)), ((), ())))), argnums=(0, 1)),
     (jax.ShapeDtypeStruct((256, 4, 128), jnp.bfloat16), jax.ShapeDtypeStruct((4, 128, 256), jnp.float32)),
     TRAINING),
    ("einsum (nnx.Einsum)", jax.grad(_loss(lambda x, w: fg.einsum("td,dnh->tnh", x, w)), argnums=(0, 1)),
     (X, jax.ShapeDtypeStruct((512, 4, 64), jnp.float32)), TRAINING),
])
def test_training_paths_lower_to_kernels(kernels_on, name, fn, args, want):
    assert set(want.split()) <= cuda_targets(fn, *args), name


# Odd shapes: T = 1000 tokens, K = 200, N = 296, F = 136: none a multiple of 32 (the contracted axes
# are padded by the quantizers), the model widths multiples of 8 (rows the GEMMs can store).
XO, WO = jax.ShapeDtypeStruct((1000, 200), jnp.bfloat16), jax.ShapeDtypeStruct((200, 296), jnp.bfloat16)
WO2, WO3 = jax.ShapeDtypeStruct((296, 136), jnp.bfloat16), jax.ShapeDtypeStruct((2, 200, 296), jnp.bfloat16)


@pytest.mark.parametrize("name,fn,args", [
    ("fp8_dot", jax.grad(_loss(fg.fp8_dot), argnums=(0, 1)), (XO, WO)),
    ("fp8_dot forward", fg.fp8_dot, (XO, WO)),
    ("fp8_mlp", jax.grad(_loss(fg.fp8_mlp), argnums=(0, 1, 2)), (XO, WO, WO2)),
    ("fp8_mlp forward", fg.fp8_mlp, (XO, WO, WO2)),
    ("ragged_dot", jax.grad(_loss(fg.ragged_dot), argnums=(0, 1)), (XO, WO3, SIZES)),
])
def test_training_paths_copy_nothing_to_pad(kernels_on, name, fn, args):
    """At shapes no GEMM takes as they are, the quantizers write the FP8 operands zero-padded
    (align), and every GEMM's output has the op's own shape: no pad of an input and no slice of a
    result (bf16 or FP8 copies) anywhere in the training step."""
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    copies = re.findall(r"stablehlo\.(?:pad|slice)\b[^\n]*(?:bf16|f8E4M3FN)>", text)
    assert "fp8gemm_" in text and not copies, copies


# Model widths that are not multiples of 8 (K = 201, N = 300, F = 130): the weights (and dy) are
# padded to 8 for the GEMMs' output rows and the results cut back; every GEMM still runs its kernel.
XW, WW = jax.ShapeDtypeStruct((1000, 201), jnp.bfloat16), jax.ShapeDtypeStruct((201, 300), jnp.bfloat16)
WW2, WW3 = jax.ShapeDtypeStruct((300, 130), jnp.bfloat16), jax.ShapeDtypeStruct((2, 201, 300), jnp.bfloat16)


@pytest.mark.parametrize("name,fn,args,want", [
    ("fp8_dot", jax.grad(_loss(fg.fp8_dot), argnums=(0, 1)), (XW, WW), TRAINING),
    ("fp8_mlp", jax.grad(_loss(fg.fp8_mlp), argnums=(0, 1, 2)), (XW, WW, WW2), TRAINING),
    ("fp8_mlp forward", fg.fp8_mlp, (XW, WW, WW2), "fp8gemm_gemm"),
    ("ragged_dot", jax.grad(_loss(fg.ragged_dot), argnums=(0, 1)), (XW, WW3, SIZES),
     "fp8gemm_grouped_gemm fp8gemm_grouped_gemm_wgrad"),
])
def test_odd_model_widths_reach_the_kernels(kernels_on, name, fn, args, want):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a reference fallback warns
        assert set(want.split()) <= cuda_targets(fn, *args), name


def _result_types(fn, target, *args):
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    return re.findall(rf"@{target}\(.*\) -> tensor<([^>]*)>", text)


@pytest.mark.parametrize("w_dtype,want", [(jnp.bfloat16, "bf16"), (jnp.float32, "f32")])
def test_weight_gradient_dtype_from_the_kernel(kernels_on, w_dtype, want):
    """A bf16 weight's gradient comes out of the wgrad kernel in bf16 (no FP32 round trip and
    convert); an f32 weight's in f32. Dense and k-grouped."""
    w = jax.ShapeDtypeStruct(W1.shape, w_dtype)
    dense = _result_types(jax.grad(_loss(fg.fp8_dot), argnums=1), "fp8gemm_gemm_wgrad", X, w)
    assert dense == [f"512x1024x{want}"]
    w3 = jax.ShapeDtypeStruct(W3.shape, w_dtype)
    grouped = _result_types(jax.grad(_loss(fg.ragged_dot), argnums=1), "fp8gemm_grouped_gemm_wgrad", X, w3, SIZES)
    assert grouped == [f"2x512x256x{want}"]


@pytest.mark.parametrize("w_dtype,block_n", [(jnp.float32, 128), (jnp.bfloat16, 96)])
def test_weight_gradient_tile_follows_the_output_dtype(kernels_on, w_dtype, block_n):
    """The k-grouped wgrad's tile is picked for the dtype the kernel writes: at 24 experts x 1280
    tokens (10 k-blocks per group) an f32 weight's gradient takes 256x128, a bf16 one's 256x96
    with its scale operands (gemm_config._SCALE_MMA_SHORT_K_BLOCKS)."""
    x = jax.ShapeDtypeStruct((24 * 1280, 7168), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((24, 7168, 2048), w_dtype)
    sizes = jax.ShapeDtypeStruct((24,), jnp.int32)
    f = jax.grad(_loss(fg.ragged_dot), argnums=1)
    text = jax.jit(f).trace(x, w, sizes).lower(lowering_platforms=("cuda",)).as_text()
    (call,) = [line for line in text.splitlines() if "@fp8gemm_grouped_gemm_wgrad" in line]
    assert re.findall(r"block_m = (\d+)", call) == ["256"] and re.findall(r"block_n = (\d+)", call) == [str(block_n)]


def _wgrad_operand_types(m, n, t, g=None):
    """The operand types of the wgrad FFI call (k-grouped with g groups)."""
    a = jax.ShapeDtypeStruct((m, t), jnp.float8_e4m3fn)
    b = jax.ShapeDtypeStruct((n, t), jnp.float8_e4m3fn)
    a_s = jax.ShapeDtypeStruct((m, -(-t // 128)), jnp.float32)
    b_s = jax.ShapeDtypeStruct((n, -(-t // 128)), jnp.float32)
    if g is None:
        op, args, target = fg.gemm_wgrad, (a, a_s, b, b_s), "fp8gemm_gemm_wgrad"
    else:
        sizes = jax.ShapeDtypeStruct((g,), jnp.int32)
        op, args, target = fg.grouped_gemm_wgrad, (a, a_s, b, b_s, sizes), "fp8gemm_grouped_gemm_wgrad"
    text = jax.jit(op).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    return re.findall(rf"@{target}\((.*)\) ->", text)[0]


@pytest.mark.parametrize("g", [None, 8])
def test_wgrad_scale_operand_only_for_the_256x96_tile(kernels_on, g):
    """The wgrad (dense, and k-grouped with g groups) hands the scale operands, A's uint32
    [cdiv(T,128), align(M,4)] and B's bf16 [cdiv(T,128), N, 8], to the kernel when the picker takes
    the 256x96 tile (scale products on the tensor cores), empty ones otherwise."""
    from jax_fp8gemm import gemm_config
    k_grouped = {"g": g, "k_grouped": True} if g else {}
    picked = gemm_config.pick_wgrad(1000, 2600, 528, 132, **k_grouped)
    assert (picked.block_m, picked.block_n) == (256, 96)
    assert "tensor<5x1000xui32>, tensor<5x2600x8xbf16>" in _wgrad_operand_types(1000, 2600, 528, g)
    assert gemm_config.pick_wgrad(64, 2600, 528, 132, **k_grouped).block_m == 64
    assert "tensor<0x0xui32>, tensor<0x0x8xbf16>" in _wgrad_operand_types(64, 2600, 528, g)


@pytest.mark.parametrize("jit", [False, True])
def test_wgrad_scale_operands_split_each_scale(jit):
    """B's operand: (hi, hi, lo, lo, 0 x 4) per column and k-block, hi = bf16(s), hi + lo = s to
    ~2^-16 for scales from 2^-110 up (amax from ~3e-31), and FLT_MIN (all-zero groups) exactly;
    below, XLA flushes lo to zero (relative error up to 2^-9 on such negligible groups). A's: the
    same pair packed in one word. Also under jit, where XLA on GPU may drop an f32 -> bf16 -> f32
    round trip inside a fusion: written that way, lo came out 0 (session 47)."""
    import numpy as np
    from jax_fp8gemm.wgrad import scale_operand_a, scale_operand_b
    if jit:
        scale_operand_a, scale_operand_b = jax.jit(scale_operand_a), jax.jit(scale_operand_b)
    rng = np.random.default_rng(0)
    s = (rng.uniform(0.5, 1.0, (37, 5)) * 2.0 ** rng.integers(-109, 100, (37, 5))).astype(np.float32)
    s[0, 0] = np.finfo(np.float32).tiny
    s[1, 0] = np.float32(1.0 + 2.0**-8)  # a tie: hi rounds to even, as bf16(s) does
    ops = np.asarray(scale_operand_b(jnp.asarray(s)).astype(jnp.float32))
    assert ops.shape == (5, 37, 8)
    hi, lo = ops[..., 0], ops[..., 2]
    np.testing.assert_array_equal(ops[..., 1], hi)
    np.testing.assert_array_equal(ops[..., 3], lo)
    assert not ops[..., 4:].any()
    np.testing.assert_array_equal(hi, np.asarray(jnp.asarray(s.T).astype(jnp.bfloat16).astype(jnp.float32)))
    rel = np.abs((hi.astype(np.float64) + lo) - s.T) / s.T
    assert rel.max() <= 2.0 ** -16, rel.max()
    # A's operand: the same pair as one word per scale (hi in the low half), MN-major, M padded to 4.
    words = np.asarray(scale_operand_a(jnp.asarray(s)))
    assert words.dtype == np.uint32 and words.shape == (5, 40)
    as_f32 = lambda half: (half.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(as_f32(words[:, :37] & 0xFFFF), hi)
    np.testing.assert_array_equal(as_f32(words[:, :37] >> 16), lo)


# ------------------------------------------------------------------ jax.export
EXPORTED = [
    ("fp8_dot training", jax.grad(_loss(fg.fp8_dot), argnums=(0, 1)), (X, W1), TRAINING),
    ("fp8_mlp training", jax.grad(_loss(fg.fp8_mlp), argnums=(0, 1, 2)), (X, W1, W2),
     TRAINING + " fp8gemm_quantize_transpose_act_grad"),
    ("ragged_dot training", jax.grad(_loss(fg.ragged_dot), argnums=(0, 1)), (X, W3, SIZES),
     "fp8gemm_grouped_gemm fp8gemm_grouped_gemm_wgrad"),
    ("grouped_gemm_masked", fg.grouped_gemm_masked,
     (jax.ShapeDtypeStruct((2, 64, 512), jnp.float8_e4m3fn), jax.ShapeDtypeStruct((2, 64, 4), jnp.float32),
      jax.ShapeDtypeStruct((2, 256, 512), jnp.float8_e4m3fn), jax.ShapeDtypeStruct((2, 2, 4), jnp.float32),
      SIZES), "fp8gemm_grouped_gemm_masked"),
]


def _concrete(args, seed=0):
    """Random arrays for ShapeDtypeStructs (group sizes in 0..200)."""
    keys = jax.random.split(jax.random.key(seed), len(args))
    return [jax.random.randint(k, a.shape, 0, 200, a.dtype) if a.dtype == jnp.int32
            else jax.random.normal(k, a.shape, jnp.float32).astype(a.dtype) for k, a in zip(keys, args)]


@pytest.mark.parametrize("name,fn,args,want", EXPORTED)
def test_export_with_the_kernels(kernels_on, name, fn, args, want):
    """jax.export refuses our custom calls unless told (`fg.export_disabled_checks()`); with it, a
    program exported for CPU and CUDA calls the kernels on CUDA, and its CPU branch runs the
    reference bitwise as the jitted function does."""
    with pytest.raises(ValueError, match="custom calls"):
        jax.export.export(jax.jit(fn), platforms=("cuda",))(*args)
    exported = jax.export.export(jax.jit(fn), platforms=("cpu", "cuda"),
                                 disabled_checks=fg.export_disabled_checks())(*args)
    assert set(want.split()) <= set(re.findall(r"@(fp8gemm_\w+)", exported.mlir_module())), name
    concrete = _concrete(args)
    for got, ref in zip(jax.tree.leaves(exported.call(*concrete)), jax.tree.leaves(jax.jit(fn)(*concrete))):
        assert got.dtype == ref.dtype and jnp.array_equal(got, ref), name


def test_export_round_trips_serialization(kernels_on):
    pytest.importorskip("flatbuffers")  # jax.export's serialization needs it
    fn, args = EXPORTED[0][1], EXPORTED[0][2]
    exported = jax.export.export(jax.jit(fn), platforms=("cpu", "cuda"),
                                 disabled_checks=fg.export_disabled_checks())(*args)
    restored = jax.export.deserialize(exported.serialize())
    assert restored.mlir_module() == exported.mlir_module()
    concrete = _concrete(args)
    for got, ref in zip(jax.tree.leaves(restored.call(*concrete)), jax.tree.leaves(exported.call(*concrete))):
        assert jnp.array_equal(got, ref)


def test_export_targets_are_the_registered_ones():
    """export_disabled_checks() names exactly the targets the compiled module registers."""
    if not _kernels.extension_built():
        pytest.skip("built without nvcc")
    assert set(_kernels._cuda.registrations()) == set(_kernels.TARGETS)


def test_shape_polymorphic_export_lowers_to_the_reference(kernels_on):
    """The kernels' configurations are per static shape: with a symbolic batch the ops lower to
    the reference (once warned) on CUDA too, and the exported program runs at any batch."""
    _kernels.warn_once.cache_clear()  # each message warns once per process
    (b,) = jax.export.symbolic_shape("b")
    fn = jax.grad(_loss(fg.fp8_dot), argnums=(0, 1))
    x = jax.ShapeDtypeStruct((b, X.shape[1]), X.dtype)
    with pytest.warns(RuntimeWarning, match="symbolic shapes lower to the jnp reference"):
        exported = jax.export.export(jax.jit(fn), platforms=("cpu", "cuda"),
                                     disabled_checks=fg.export_disabled_checks())(x, W1)
    targets = set(re.findall(r"@(fp8gemm_\w+)", exported.mlir_module()))
    assert not targets & {"fp8gemm_gemm", "fp8gemm_gemm_wgrad"}, targets
    for rows in (40, 300):
        concrete = _concrete((jax.ShapeDtypeStruct((rows, X.shape[1]), X.dtype), W1), seed=rows)
        for got, ref in zip(exported.call(*concrete), jax.jit(fn)(*concrete)):
            assert got.shape == ref.shape and jnp.array_equal(got, ref)
