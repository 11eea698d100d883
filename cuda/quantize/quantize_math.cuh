// Device math shared by the quantization kernels (quantize.cu, quantize_transpose.cu): the scale
// rule and the e4m3 conversion of quantize.h, and 8-element vector loads. Bitwise the math of
// jax_fp8gemm/reference.py.
#pragma once
#include <cfloat>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <type_traits>

#include "common/sm90_ptx.cuh"

namespace fp8gemm {
namespace quant {

constexpr int kGroup = 128;                       // elements that share one scale along an axis
constexpr float kInvE4M3Max = 1.0f / 448.0f;      // 448 = largest finite e4m3fn value
constexpr int kVec = 8;                           // elements per thread and load: 16 B of bf16/f16
constexpr int kThreadsPerGroup = kGroup / kVec;   // 16: half a warp covers one 128-wide group

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

// Elements of an 8-wide chunk starting at col that lie before `end` (0..8).
__device__ __forceinline__ int chunk_valid(int64_t col, int64_t end) {
  const int64_t left = end - col;
  return left <= 0 ? 0 : (left >= kVec ? kVec : int(left));
}

// Max of two magnitudes (sign bits clear) that propagates NaN like XLA's max (fmaxf would drop
// it): such floats' bit patterns order like their values, NaN above inf, so one integer max does.
__device__ __forceinline__ float mag_max(float a, float b) {
  return __int_as_float(max(__float_as_int(a), __float_as_int(b)));
}

// reference.py: scale_from_amax. FLT_MIN floor keeps an all-zero group finite (q = 0, not NaN).
__device__ __forceinline__ float scale_from_amax(float amax, bool pow2) {
  float s = amax * kInvE4M3Max;
  s = s < FLT_MIN ? FLT_MIN : s;  // a NaN compares false and stays NaN
  if (pow2) {
    uint32_t bits = __float_as_uint(s);
    const bool finite = (bits & 0x7F800000u) != 0x7F800000u;
    if (finite && (bits & 0x007FFFFFu)) bits = (bits + 0x00800000u) & 0xFF800000u;  // 2^ceil(log2 s)
    s = __uint_as_float(bits);
  }
  return s;
}

// The 8 16-bit values of a packed 16-byte chunk, as floats.
template <typename T>
__device__ __forceinline__ void unpack(const uint4& raw, float (&v)[kVec]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec; ++i) v[i] = to_float(e[i]);
}

// An in-bounds, 16-byte aligned chunk of kVec elements as raw 16-byte words (one for 16-bit
// types, two for floats). Kernels that keep several chunks in flight load them raw first and
// convert each at its first use (raw_to_floats), so that no load waits for another's conversion.
template <typename T>
constexpr int kRawWords = kVec * static_cast<int>(sizeof(T)) / 16;

// (Zeros instead where `in_bounds` is false: p is then not read.)
template <typename T>
__device__ __forceinline__ void load_raw(const T* p, uint4 (&raw)[kRawWords<T>], bool in_bounds = true) {
#pragma unroll
  for (int w = 0; w < kRawWords<T>; ++w)
    raw[w] = in_bounds ? __ldg(reinterpret_cast<const uint4*>(p) + w) : make_uint4(0, 0, 0, 0);
}

template <typename T>
__device__ __forceinline__ void raw_to_floats(const uint4 (&raw)[kRawWords<T>], float (&v)[kVec]) {
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = __uint_as_float(reinterpret_cast<const uint32_t*>(raw)[i]);
  } else {
    unpack<T>(raw[0], v);
  }
}

// A whole chunk of kVec elements at p as Words (p aligned to a Word), as floats.
template <typename T, typename Word>
__device__ __forceinline__ void load_words(const T* p, float (&v)[kVec]) {
  constexpr int kWords = static_cast<int>(kVec * sizeof(T) / sizeof(Word));
  Word w[kWords];
#pragma unroll
  for (int j = 0; j < kWords; ++j) w[j] = __ldg(reinterpret_cast<const Word*>(p) + j);
  const T* e = reinterpret_cast<const T*>(w);
#pragma unroll
  for (int i = 0; i < kVec; ++i) v[i] = to_float(e[i]);
}

// Loads up to kVec elements starting at p (count valid), zero-filling the rest.
// kAligned: the 8 elements are in bounds and 16-byte aligned, so vector loads do. Otherwise a
// whole chunk still loads as 8- or 4-byte words where p's alignment allows (16-bit rows of an
// even length: 4 loads instead of 8), element by element only at the edges and at odd lengths.
template <typename T, bool kAligned>
__device__ __forceinline__ void load_vec(const T* p, int valid, float (&v)[kVec]) {
  if constexpr (kAligned) {
    uint4 raw[kRawWords<T>];
    load_raw(p, raw);
    raw_to_floats<T>(raw, v);
  } else {
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    if (valid == kVec && at % 8 == 0) {
      load_words<T, uint2>(p, v);
    } else if (valid == kVec && at % 4 == 0) {
      load_words<T, uint32_t>(p, v);
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) v[i] = i < valid ? to_float(p[i]) : 0.0f;
    }
  }
}

// Activations fused into the row-wise quantize + transpose (an MLP's hidden layer, quantized for
// the down projection without materializing act(u); jax_fp8gemm/mlp.py):
//   kGelu:     x -> gelu(x)               (jax.nn.gelu, approximate=True: x * (1 + tanh(z)) / 2,
//                                          z = sqrt(2/pi) * (x + 0.044715 x^3))
//   kGeluGrad: (g, u) -> g * gelu'(u)     (the hidden layer's gradient, from the down projection's
//                                          dgrad g and the saved pre-activation u)
// Computed in float32 and rounded to the input dtype, as the unfused XLA path stores its result.
// (1 + tanh(z)) / 2 is evaluated as sigmoid(2z) = 1 / (1 + exp(-2z)), the same function without
// the cancellation of 1 + tanh(z) for z << 0 (there, tanh's last-bit error is the whole result);
// 1 - tanh(z)^2 = 4 sigmoid(2z) (1 - sigmoid(2z)). reference.py uses the same formulas.
enum class Act : int { kNone = 0, kGelu = 1, kGeluGrad = 2 };

// sigmoid(2z) for gelu's z at x, as 1 / (1 + 2^(x (k0 + k1 x^2))) with the constants folded
// (k0 = -2 log2(e) sqrt(2/pi), k1 = k0 * 0.044715) and the .ftz forms of ex2.approx (2 ulp) and
// rcp.approx: one MUFU each, where expf, the IEEE division and the non-.ftz forms add range
// fix-ups. The fused quantizers issue-bound on this math (ncu: ~80% of issue slots, RESULTS.md
// session 14); the result is rounded to bf16/f16 (or quantized to e4m3) right after, so the last
// bits rarely show. For z << 0 the exp overflows to inf: the result is then 0 (the reference: a
// denormal or 0), never NaN.
constexpr float kSigmoidK0 = float(-2.0 * 1.4426950408889634 * 0.7978845608028654);
constexpr float kSigmoidK1 = float(-2.0 * 1.4426950408889634 * 0.7978845608028654 * 0.044715);
constexpr float kGeluGradK0 = float(2.0 * 0.7978845608028654);             // d(2z)/du = k0' + k1' u^2
constexpr float kGeluGradK1 = float(2.0 * 0.7978845608028654 * 3.0 * 0.044715);

__device__ __forceinline__ float gelu_sigmoid(float x, float x2) {
  return ptx::rcp_approx_ftz(1.0f + ptx::ex2_approx_ftz(x * fmaf(kSigmoidK1, x2, kSigmoidK0)));
}

__device__ __forceinline__ float gelu(float x) { return x * gelu_sigmoid(x, x * x); }

// gelu'(u) = p + u p (1 - p) d(2z)/du, p = sigmoid(2z)
__device__ __forceinline__ float gelu_grad(float u) {
  const float u2 = u * u, p = gelu_sigmoid(u, u2);
  return fmaf(u * (p * (1.0f - p)), fmaf(kGeluGradK1, u2, kGeluGradK0), p);
}

template <Act kAct>
__device__ __forceinline__ float activate(float x, float u) {
  if constexpr (kAct == Act::kGelu) return gelu(x);
  else if constexpr (kAct == Act::kGeluGrad) return x * gelu_grad(u);
  else return x;
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

// Two floats rounded to a 16-bit T, packed low | high << 16: one F2FP instead of two converts
// and a byte permute.
template <typename T>
__device__ __forceinline__ uint32_t round_pair(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return ptx::pack_bf16x2(lo, hi);
  } else {
    static_assert(std::is_same_v<T, __half>, "16-bit types");
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// Converts v * inv to e4m3 with saturation (satfinite == reference's clip(-448, 448) then cast;
// NaN stays NaN). inv = 1/s, IEEE-divided once per group: a product with the reciprocal rather
// than a division per element, because XLA turns x / broadcast(s) into exactly this, so the
// reference agrees bitwise on every backend.
template <int N>
__device__ __forceinline__ void to_e4m3(const float (&v)[N], float inv, uint8_t (&out)[N]) {
  static_assert(N % 2 == 0, "pairs");
#pragma unroll
  for (int i = 0; i < N; i += 2) {
    const __nv_fp8x2_storage_t pair = __nv_cvt_float2_to_fp8x2(
        make_float2(__fmul_rn(v[i], inv), __fmul_rn(v[i + 1], inv)), __NV_SATFINITE, __NV_E4M3);
    out[i] = pair & 0xFF;
    out[i + 1] = pair >> 8;
  }
}

// Stores the first `valid` of the N bytes at b (N = 8 or 16, b N-byte aligned) at dst. kAligned: all
// N, at an N-byte aligned dst, in one store. Otherwise a whole chunk goes as the widest words dst's
// alignment allows (rows off 16 bytes, e.g. qt at 8200 tokens: 4-5x faster than single bytes), and
// single bytes only for a partial one.
template <int N, bool kAligned>
__device__ __forceinline__ void store_bytes(uint8_t* dst, const uint8_t* b, int valid) {
  static_assert(N == 8 || N == 16, "a chunk of q (8 bytes) or of qt (16)");
  using Whole = typename std::conditional<N == 16, uint4, uint2>::type;
  const uintptr_t at = reinterpret_cast<uintptr_t>(dst);
  if (kAligned || (valid == N && at % N == 0)) {
    *reinterpret_cast<Whole*>(dst) = *reinterpret_cast<const Whole*>(b);
  } else if (N == 16 && valid == N && at % 8 == 0) {
#pragma unroll
    for (int j = 0; j < N / 8; ++j) reinterpret_cast<uint2*>(dst)[j] = reinterpret_cast<const uint2*>(b)[j];
  } else if (valid == N && at % 4 == 0) {
#pragma unroll
    for (int j = 0; j < N / 4; ++j) reinterpret_cast<uint32_t*>(dst)[j] = reinterpret_cast<const uint32_t*>(b)[j];
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (i < valid) dst[i] = b[i];
  }
}

// Quantizes v with the inverse scale inv = 1 / s and stores up to kVec bytes (kAligned: all 8,
// 8-byte aligned).
template <bool kAligned>
__device__ __forceinline__ void store_vec(uint8_t* q, int valid, const float (&v)[kVec], float inv) {
  alignas(8) uint8_t out[kVec];
  to_e4m3(v, inv, out);
  store_bytes<kVec, kAligned>(q, out, valid);
}
}  // namespace quant
}  // namespace fp8gemm
