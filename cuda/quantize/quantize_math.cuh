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

// The 8 16-bit values of a packed 16-byte chunk, as floats. kWords: taken from its 32-bit words (a
// bf16 pair: one shift and one mask); read as 16-bit elements instead, the compiler split and
// rejoined the words around the transposing kernels' activations (~100 PRMTs per gelu tile). The
// row-wise quantizer reads elements: with words it ran 5% slower at rows off 8 elements, where its
// chunks are loaded in pieces (session 61, call A).
template <typename T, bool kWords = true>
__device__ __forceinline__ void unpack(const uint4& raw, float (&v)[kVec]) {
  if constexpr (!kWords) {
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = to_float(e[i]);
  } else {
    const uint32_t w[kVec / 2] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < kVec / 2; ++j) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        v[2 * j] = __uint_as_float(w[j] << 16);
        v[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
      } else {
        static_assert(std::is_same_v<T, __half>, "16-bit types");
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[j]));
        v[2 * j] = f.x;
        v[2 * j + 1] = f.y;
      }
    }
  }
}

// A chunk of kVec elements as raw 16-byte words (one for 16-bit types, two for floats). Kernels
// load all their chunks raw first (load_chunks) and convert each at its first use (raw_to_floats),
// so that no load waits for another's conversion.
template <typename T>
constexpr int kRawWords = kVec * static_cast<int>(sizeof(T)) / 16;

template <typename T, bool kWords = true>
__device__ __forceinline__ void raw_to_floats(const uint4 (&raw)[kRawWords<T>], float (&v)[kVec]) {
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = __uint_as_float(reinterpret_cast<const uint32_t*>(raw)[i]);
  } else {
    unpack<T, kWords>(raw[0], v);
  }
}

// The alignment in bytes (2 to 16) that every chunk of a row-major x [..., cols] shares: chunks start
// kVec elements apart (16 or 32 bytes) within rows of `cols` elements, so a row's length and x's
// address decide it for the whole launch.
template <typename T>
__device__ __forceinline__ int chunk_alignment(const T* x, int64_t cols) {
  const uint64_t bits = uint64_t(reinterpret_cast<uintptr_t>(x)) | uint64_t(cols) * sizeof(T) | 16u;
  return int(bits & (~bits + 1));  // the lowest set bit
}

// Chunks j < R (kVec elements at src(j), as raw words) as Words: whole where valid(j) == kVec, zeros
// where it is 0.
template <typename T, typename Word, int R, typename Src, typename Valid>
__device__ __forceinline__ void load_chunks_as(const Src& src, const Valid& valid, uint4 (&raw)[R][kRawWords<T>]) {
  constexpr int kWords = static_cast<int>(kVec * sizeof(T) / sizeof(Word));
#pragma unroll
  for (int j = 0; j < R; ++j) {
    Word* w = reinterpret_cast<Word*>(raw[j]);
#pragma unroll
    for (int k = 0; k < kWords; ++k) w[k] = valid(j) == kVec ? __ldg(reinterpret_cast<const Word*>(src(j)) + k) : Word{};
  }
}

// R chunks of kVec elements as raw words (raw_to_floats converts them): chunk j from src(j), its
// first valid(j) elements, zeros past them (src and valid: functions of j, so that no array of R
// addresses is live at once). The loads of all R are issued before any value is used, with no branch
// between them, where every chunk is whole or empty: always so where kAligned (16-byte aligned
// chunks); otherwise as the widest words that `align` (chunk_alignment, one for the launch) allows.
// A row's last, partial chunk and rows of an odd 16-bit length (whose alignment changes from row to
// row) go chunk by chunk, as 4-byte words where the address allows, else element by element.
template <typename T, bool kAligned, int R, typename Src, typename Valid>
__device__ __forceinline__ void load_chunks(const Src& src, const Valid& valid, int align, uint4 (&raw)[R][kRawWords<T>]) {
  bool whole = true;
#pragma unroll
  for (int j = 0; j < R; ++j) whole = whole && (valid(j) == 0 || valid(j) == kVec);
  // (Rows of 16-bit values are 16-byte aligned only where kAligned: kAligned <=> cols % kVec == 0.)
  if (kAligned || (sizeof(T) == 4 && whole && align >= 16)) {
    load_chunks_as<T, uint4>(src, valid, raw);
  } else if (whole && align == 8) {
    load_chunks_as<T, uint2>(src, valid, raw);
  } else if (whole && align == 4) {
    load_chunks_as<T, uint32_t>(src, valid, raw);
  } else {
    using Bits = typename std::conditional<sizeof(T) == 2, unsigned short, uint32_t>::type;
#pragma unroll
    for (int j = 0; j < R; ++j) {
      const T* p = src(j);
      const int n = valid(j);
      if (n == kVec && reinterpret_cast<uintptr_t>(p) % 4 == 0) {
#pragma unroll
        for (int k = 0; k < kVec * static_cast<int>(sizeof(T)) / 4; ++k)
          reinterpret_cast<uint32_t*>(raw[j])[k] = __ldg(reinterpret_cast<const uint32_t*>(p) + k);
      } else {
#pragma unroll
        for (int i = 0; i < kVec; ++i)
          reinterpret_cast<Bits*>(raw[j])[i] = i < n ? __ldg(reinterpret_cast<const Bits*>(p) + i) : Bits(0);
      }
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
// fix-ups (the reciprocal by Newton steps on the FMA pipe instead ran gelu 0.2-1.4% slower,
// RESULTS.md session 63); the result is rounded to bf16/f16 (or quantized to e4m3) right after,
// so the last bits rarely show. For z << 0 the exp overflows to inf: the result is then 0 (the
// reference: a denormal or 0), never NaN.
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

// lo * inv and hi * inv as e4m3 with saturation (satfinite == reference's clip(-448, 448) then
// cast; NaN stays NaN), lo in the low byte. inv = 1/s, IEEE-divided once per group: a product with
// the reciprocal rather than a division per element, because XLA turns x / broadcast(s) into
// exactly this, so the reference agrees bitwise on every backend.
__device__ __forceinline__ uint32_t e4m3_pair(float lo, float hi, float inv) {
  return __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(lo, inv), __fmul_rn(hi, inv)), __NV_SATFINITE,
                                  __NV_E4M3);
}

// v * inv as e4m3, four bytes per word (byte i of out = element i). Each word is two converts, the
// second merging into the first's word (F2FP ... PACK_AB_MERGE_C): built byte by byte instead, the
// compiler spent ~6 more shifts, masks and moves per word (session 60).
template <int N>
__device__ __forceinline__ void to_e4m3(const float (&v)[N], float inv, uint32_t (&out)[N / 4]) {
  static_assert(N % 4 == 0, "whole words");
  auto pair = [&](int i) { return e4m3_pair(v[i], v[i + 1], inv); };
#pragma unroll
  for (int j = 0; j < N / 4; ++j) out[j] = pair(4 * j) | pair(4 * j + 2) << 16;
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
  alignas(8) uint32_t out[kVec / 4];
  to_e4m3(v, inv, out);
  store_bytes<kVec, kAligned>(q, reinterpret_cast<const uint8_t*>(out), valid);
}
}  // namespace quant
}  // namespace fp8gemm
