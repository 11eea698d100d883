// Standalone correctness + performance test of the weight-gradient (wgrad) sm90 FP8 GEMMs (no JAX
// needed): launch_fp8_gemm_wgrad (dense) and launch_fp8_grouped_gemm_wgrad (k-grouped), against a
// float64 host reference.
//
// Build (from the repository root):
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 --expt-relaxed-constexpr -Icuda
//        tools/wgrad_standalone_test.cu cuda/gemm/*.cu -o build/wgrad_standalone_test
//
// Usage: wgrad_standalone_test [--small] [--no-bench] [--bench-only] [--shape=MxNxT] [--tile=BMxBN]
//                              [--seed=N] [--runs=N] [--out=bf16] [--multicast=2A|2B] [--moe=GxMEANxMxN]
//   --small       tiny cases only, no benchmark (for compute-sanitizer memcheck / racecheck)
//   --no-bench    correctness only;  --bench-only: timing only
//   --shape=MxNxT time this dense problem only;  --tile=BMxBN: only this tile (with --shape, also a
//                 64-row one); together they time one kernel, e.g. for tools/ncu_gemm.sh
//   --out=bf16    time the bf16-output kernels (default FP32)
//   --multicast=2A|2B  time in CTA pairs sharing A / B (default: no clusters; k-grouped: 2A only)
//   --moe=GxMEANxMxN  time one k-grouped problem instead of the default cases, G groups of MEAN
//                 tokens: even, MoE-like (log-normal popularity: boundaries inside 128-token blocks) and
//                 the MoE sizes padded to 128; with -DFP8GEMM_EXPERIMENT_TIMELINE (tools/timeline.sh)
//                 also where the tiles spend their time
//
// Data (host-generated from a hash of (seed, tensor, row, col), uploaded): A [M, T], B [N, T] are
// random e4m3 codes with magnitudes 2^-3 .. 30 (never zero, never NaN) -- also on the tokens that
// belong to no group, so a tile that reads outside its group's k-range shows up; scales are random
// positive 2^-4 .. 2^4, MN-major with NaN in the padding columns past M / N (never read).
// Checks per case and configuration (every compiled tile, default pipeline on all SMs + 2 stages on
// 5 SMs so that each CTA walks many tiles and groups; also in CTA pairs sharing A (and B, dense)):
//   * D poisoned with 0xFF bytes (NaN) before every run;
//   * calc_diff <= 1e-5 against the float64 reference and a per-element bound
//     |x - y| <= 1e-3 * (|y| + rms(ref)), on every element for small cases, on sampled rows x
//     columns (edges + random) for big ones; an empty group's out[g] must be exactly 0;
//   * two runs bitwise identical;
//   * the bf16-output kernel of every configuration writes exactly the FP32 output rounded to
//     bf16 (poisoned, two runs, every element);
//   * bad problems / configs rejected with cudaErrorInvalidValue.
// Timing (default, not with --small): dense M=N=7168 (and 4096x7168), T=4096/8192; k-grouped
// 8 groups x 4096 tokens (even, and uneven with unaligned boundaries), M=4096, N=7168; median over
// --runs runs with L2 flushed, TFLOP/s.
// Exit code: 0 iff every check passed.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gemm/fp8_gemm.h"
#include "harness_common.cuh"
#include "timeline_summary.h"  // -DFP8GEMM_EXPERIMENT_TIMELINE builds only (tools/timeline.sh)

using fp8gemm::GemmConfig;
using fp8gemm::GroupedWgradGemmProblem;
using fp8gemm::WgradGemmProblem;

namespace {

uint64_t g_seed = 1;

uint32_t mix(uint64_t a, uint64_t b, uint64_t c) {
  const uint64_t z = g_seed ^ (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full) ^ (c * 0x165667B19E3779F9ull);
  return static_cast<uint32_t>(splitmix64_mix(z) >> 32);
}

// e4m3fn code with exponent field 4..11 (2^-3 .. 2^4 times 1.mmm): never zero, never NaN.
uint8_t random_e4m3(uint32_t h) {
  const uint32_t sign = h & 1u, mant = (h >> 1) & 7u, exp = 4u + ((h >> 4) % 8u);
  return static_cast<uint8_t>((sign << 7) | (exp << 3) | mant);
}

double decode_e4m3(uint8_t v) {
  const int sign = v >> 7, exp = (v >> 3) & 15, mant = v & 7;
  const double mag = exp == 0 ? std::ldexp(mant / 8.0, -6) : std::ldexp(1.0 + mant / 8.0, exp - 7);
  return sign ? -mag : mag;
}

float random_scale(uint32_t h) {
  return std::ldexp(1.0f + static_cast<float>(h & 1023u) / 1024.0f, static_cast<int>((h >> 10) % 8u) - 4);
}

// One operand: e4m3 [rows, T] and MN-major scales [cdiv(T,128)][ld], ld = align(rows, 4).
// bf16 bits of x, rounded to nearest even (finite x).
uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// The scale operands of the 256x96 tile from MN-major scales s [tb][ld], s = hi + lo:
// A's (WgradGemmProblem::sfa_ops): uint32 [tb][ld] = hi | lo << 16;
std::vector<uint32_t> scale_operand_a(const std::vector<float>& s) {
  std::vector<uint32_t> words(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const uint16_t hi = bf16_bits(s[i]), lo = bf16_bits(s[i] - bf16_value(hi));
    words[i] = hi | static_cast<uint32_t>(lo) << 16;
  }
  return words;
}

// B's (WgradGemmProblem::sfb_ops): bf16 [tb][rows][8] = (hi, hi, lo, lo, 0, 0, 0, 0).
std::vector<uint16_t> scale_operand_b(const std::vector<float>& s, int tb, int rows, int ld) {
  std::vector<uint16_t> ops(static_cast<size_t>(tb) * rows * 8, 0);
  for (int b = 0; b < tb; ++b)
    for (int r = 0; r < rows; ++r) {
      const float v = s[static_cast<size_t>(b) * ld + r];
      const uint16_t hi = bf16_bits(v), lo = bf16_bits(v - bf16_value(hi));
      uint16_t* o = &ops[(static_cast<size_t>(b) * rows + r) * 8];
      o[0] = o[1] = hi, o[2] = o[3] = lo;
    }
  return ops;
}

struct Operand {
  int rows = 0, t = 0, ld = 0;
  std::vector<uint8_t> q;
  std::vector<float> s;  // MN-major
  uint8_t* d_q = nullptr;
  float* d_s = nullptr;
  uint32_t* d_words = nullptr;  // scale_operand_a(s): when this is A
  uint16_t* d_ops = nullptr;    // scale_operand_b(s): when this is B

  void make(int tensor, int rows_, int t_) {
    rows = rows_, t = t_, ld = (rows + 3) / 4 * 4;
    const int tb = cdiv(t, 128);
    q.resize(static_cast<size_t>(rows) * t);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < t; ++c) q[static_cast<size_t>(r) * t + c] = random_e4m3(mix(tensor, r, c));
    s.assign(static_cast<size_t>(tb) * ld, std::nanf(""));
    for (int b = 0; b < tb; ++b)
      for (int r = 0; r < rows; ++r) s[static_cast<size_t>(b) * ld + r] = random_scale(mix(tensor + 100, r, b));
    d_q = device_copy(q);
    d_s = device_copy(s);
    d_words = device_copy(scale_operand_a(s));
    d_ops = device_copy(scale_operand_b(s, tb, rows, ld));
  }
  void free_device() {
    cudaFree(d_q);
    cudaFree(d_s);
    cudaFree(d_words);
    cudaFree(d_ops);
    d_q = nullptr, d_s = nullptr, d_words = nullptr, d_ops = nullptr;
  }
  double scale(int r, int b) const { return s[static_cast<size_t>(b) * ld + r]; }
};

// float64 reference of one output element over the tokens [tok0, tok1): each 128-token block's
// partial sum times the block's two scales.
double reference(const Operand& A, const Operand& B, int m, int n, int tok0, int tok1) {
  double total = 0.0;
  const uint8_t* a = &A.q[static_cast<size_t>(m) * A.t];
  const uint8_t* bb = &B.q[static_cast<size_t>(n) * B.t];
  for (int b = tok0 / 128; b * 128 < tok1; ++b) {
    double block = 0.0;
    const int c0 = std::max(tok0, b * 128), c1 = std::min(tok1, (b + 1) * 128);
    for (int c = c0; c < c1; ++c) block += decode_e4m3(a[c]) * decode_e4m3(bb[c]);
    total += block * A.scale(m, b) * B.scale(n, b);
  }
  return total;
}

// Rows / columns to check: all of them (full) or the edges of every 64 / 16 block near the ends
// plus random ones.
std::vector<int> pick_indices(int size, bool full, uint32_t salt) {
  std::vector<int> v;
  if (full) {
    for (int i = 0; i < size; ++i) v.push_back(i);
    return v;
  }
  for (int i : {0, 1, 7, 8, 63, 64, 127, 128, size / 2, size - 129, size - 65, size - 2, size - 1})
    if (i >= 0 && i < size) v.push_back(i);
  for (int i = 0; i < 24; ++i) v.push_back(static_cast<int>(mix(salt, i, 7) % static_cast<uint32_t>(size)));
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

struct Checker {
  double xy = 0, xx = 0, yy = 0, ref_sq = 0;
  long long count = 0, bad = 0, nonfinite = 0;
  struct Item { double x, y; };
  std::vector<Item> items;
  void add(double x, double y) {
    if (!std::isfinite(x)) ++nonfinite;
    xy += x * y, xx += x * x, yy += y * y, ref_sq += y * y, ++count;
    items.push_back({x, y});
  }
  // Returns true on pass; prints a summary line.
  bool finish(const std::string& what) {
    const double diff = (xx + yy) > 0 ? 1.0 - 2.0 * xy / (xx + yy) : 0.0;
    const double rms = count ? std::sqrt(ref_sq / count) : 0.0;
    for (const Item& it : items)
      // Same per-element bound as the grouped harness: the tensor cores accumulate each
      // 128-wide block in reduced precision, so single elements near 0 may differ by ~1e-3 rms.
      if (!(std::fabs(it.x - it.y) <= 1e-2 * (std::fabs(it.y) + rms))) ++bad;
    const bool ok = nonfinite == 0 && bad == 0 && diff <= 1e-5;
    std::printf("  %-64s %s calc_diff=%.2e checked=%lld bad=%lld nonfinite=%lld\n", what.c_str(),
                ok ? "ok  " : "FAIL", diff, count, bad, nonfinite);
    if (!ok) ++g_failures;
    return ok;
  }
};

// Every tile on all SMs and with a shallow pipeline on few SMs; also in CTA pairs (on all SMs, and
// on 6 SMs: 3 pairs walking many tiles): the dense kernel sharing A and sharing B, the k-grouped
// one sharing A where the N-blocks (of n columns) come in pairs.
std::vector<GemmConfig> configs(bool small, bool dense, int n) {
  std::vector<GemmConfig> v;
  for (const fp8gemm::CompiledTile& t : fp8gemm::kCompiledWgradTiles) {
    v.push_back(GemmConfig{t.block_m, t.block_n, 0, 0, 1});
    if (!small || t.block_m == 128) v.push_back(GemmConfig{t.block_m, t.block_n, 2, 5, 1});
    if (t.block_m < 128 || (!dense && ((n + t.block_n - 1) / t.block_n) % 2 != 0)) continue;
    for (int share_a : {1, 0}) {
      if (!dense && !share_a) continue;
      v.push_back(GemmConfig{t.block_m, t.block_n, 0, 0, 2, share_a});
      if (!small) v.push_back(GemmConfig{t.block_m, t.block_n, 2, 6, 2, share_a});
    }
  }
  return v;
}

std::string cfg_name(const GemmConfig& c) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%dx%d st=%d sms=%d%s", c.block_m, c.block_n, c.num_stages, c.num_sms,
                c.multicast == 1 ? "" : (c.multicast_a ? " mc2A" : " mc2B"));
  return buf;
}

// Two runs of the same launch must give bitwise the same output [G][m][n]. On a mismatch, says how
// many elements differ and where the first ones are (group, row, col, both values), to find races.
void check_deterministic(const std::vector<float>& h, const std::vector<float>& h2, int m, int n, const char* what) {
  if (std::memcmp(h.data(), h2.data(), h.size() * 4) == 0) return;
  // Runs of differing columns per row: "g<group> r<row> c<first>-<last>".
  size_t count = 0;
  std::string runs;
  int shown = 0;
  const size_t per_group = static_cast<size_t>(m) * n;
  for (size_t e = 0; e < h.size(); ++e) {
    if (std::memcmp(&h[e], &h2[e], 4) == 0) continue;
    ++count;
    size_t last = e;
    while (last + 1 < h.size() && (last + 1) % n != 0 && std::memcmp(&h[last + 1], &h2[last + 1], 4) != 0) ++last;
    count += last - e;
    if (shown++ < 24) {
      char buf[120];
      std::snprintf(buf, sizeof(buf), " g%zu r%zu c%zu-%zu", e / per_group, e % per_group / n, e % n, last % n);
      runs += buf;
    }
    e = last;
  }
  std::printf("  %-64s FAIL not deterministic: %zu elements differ, %d runs:%s\n", what, count, shown, runs.c_str());
  ++g_failures;
}

// bf16 of an FP32 value, rounded to nearest even (cvt.rn.bf16x2.f32, what the epilogue uses; no NaNs here).
uint16_t bf16_rne(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// The bf16-output kernel of the same configuration must write exactly the FP32 kernel's output
// `h` rounded to bf16 (the same accumulation, one rounding), every element (d, d2 are poisoned
// first), and the same bits on two runs.
template <class Launch>
void check_bf16_output(const Launch& launch_bf16, const std::vector<float>& h, void* d, void* d2, const char* what) {
  const size_t elems = h.size();
  CUDA_CHECK(run_twice(launch_bf16, d, d2, elems * 2));
  std::vector<uint16_t> b(elems), b2(elems);
  CUDA_CHECK(cudaMemcpy(b.data(), d, elems * 2, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(b2.data(), d2, elems * 2, cudaMemcpyDeviceToHost));
  size_t differ = 0, first = elems;
  for (size_t e = 0; e < elems; ++e)
    if (b[e] != bf16_rne(h[e])) differ += 1, first = std::min(first, e);
  const bool deterministic = std::memcmp(b.data(), b2.data(), elems * 2) == 0;
  if (differ || !deterministic) {
    std::printf("  %-64s FAIL bf16 out: %zu of %zu elements are not the FP32 output rounded (first %zu)%s\n",
                what, differ, elems, first, deterministic ? "" : ", not deterministic");
    ++g_failures;
  }
}

// ------------------------------------------------------------------------------------------------
// Dense
// ------------------------------------------------------------------------------------------------
void test_dense(int m, int n, int t, bool full) {
  Operand A, B;
  A.make(1, m, t);
  B.make(2, n, t);
  const size_t d_elems = static_cast<size_t>(m) * n;
  float *d, *d2;
  CUDA_CHECK(cudaMalloc(&d, d_elems * 4));
  CUDA_CHECK(cudaMalloc(&d2, d_elems * 4));
  std::vector<float> h(d_elems), h2(d_elems);
  const std::vector<int> rows = pick_indices(m, full, 11), cols = pick_indices(n, full, 12);
  std::vector<double> ref(rows.size() * cols.size());
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < cols.size(); ++j) ref[i * cols.size() + j] = reference(A, B, rows[i], cols[j], 0, t);

  for (const GemmConfig& cfg : configs(full && m * n < (1 << 16), /*dense=*/true, n)) {
    auto launch_as = [&](fp8gemm::OutDtype out_dtype) {
      return [&, out_dtype](void* out) {
        const WgradGemmProblem p{A.d_q, B.d_q, A.d_s, A.ld, B.d_s, B.ld, out, m, n, t, out_dtype, A.d_words, B.d_ops};
        return fp8gemm::launch_fp8_gemm_wgrad(p, cfg, 0);
      };
    };
    CUDA_CHECK(run_twice(launch_as(fp8gemm::OutDtype::kF32), d, d2, d_elems * 4));
    CUDA_CHECK(cudaMemcpy(h.data(), d, d_elems * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(h2.data(), d2, d_elems * 4, cudaMemcpyDeviceToHost));
    Checker c;
    for (size_t i = 0; i < rows.size(); ++i)
      for (size_t j = 0; j < cols.size(); ++j)
        c.add(h[static_cast<size_t>(rows[i]) * n + cols[j]], ref[i * cols.size() + j]);
    char what[160];
    std::snprintf(what, sizeof(what), "dense M=%d N=%d T=%d %s %s", m, n, t, cfg_name(cfg).c_str(),
                  full ? "full" : "sampled");
    c.finish(what);
    check_deterministic(h, h2, m, n, what);
    if (n % 8 == 0) check_bf16_output(launch_as(fp8gemm::OutDtype::kBF16), h, d, d2, what);
  }
  cudaFree(d);
  cudaFree(d2);
  A.free_device();
  B.free_device();
}

// ------------------------------------------------------------------------------------------------
// k-grouped: `sizes` are the group sizes handed to the kernel (any values: unpadded, negative,
// running past T).
// ------------------------------------------------------------------------------------------------
void test_grouped(int m, int n, int t, const std::vector<int>& sizes, bool full) {
  const int g = static_cast<int>(sizes.size());
  Operand A, B;
  A.make(3, m, t);
  B.make(4, n, t);
  // The groups' tokens [tok0, tok1) (clamped as reference.clamp_group_sizes: negative -> 0, cut at T).
  std::vector<int> tok0(g), tok1(g);
  long long prefix = 0;
  for (int i = 0; i < g; ++i) {
    tok0[i] = static_cast<int>(prefix);
    prefix = std::min<long long>(prefix + std::max(sizes[i], 0), t);
    tok1[i] = static_cast<int>(prefix);
  }
  int* d_sizes = device_copy(sizes);
  const size_t d_elems = static_cast<size_t>(g) * m * n;
  float *d, *d2;
  CUDA_CHECK(cudaMalloc(&d, d_elems * 4));
  CUDA_CHECK(cudaMalloc(&d2, d_elems * 4));
  std::vector<float> h(d_elems), h2(d_elems);
  const std::vector<int> rows = pick_indices(m, full, 21), cols = pick_indices(n, full, 22);
  std::vector<double> ref(static_cast<size_t>(g) * rows.size() * cols.size());
  for (int gi = 0; gi < g; ++gi)
    for (size_t i = 0; i < rows.size(); ++i)
      for (size_t j = 0; j < cols.size(); ++j)
        ref[(gi * rows.size() + i) * cols.size() + j] = reference(A, B, rows[i], cols[j], tok0[gi], tok1[gi]);

  std::string sz;
  for (int i = 0; i < g && i < 8; ++i) sz += (i ? "," : "") + std::to_string(sizes[i]);
  if (g > 8) sz += ",...";
  for (const GemmConfig& cfg : configs(full && m * n < (1 << 16), /*dense=*/false, n)) {
    auto launch_as = [&](fp8gemm::OutDtype out_dtype) {
      return [&, out_dtype](void* out) {
        const GroupedWgradGemmProblem p{A.d_q, B.d_q, A.d_s, A.ld, B.d_s, B.ld, out, m, n, t, g, d_sizes, out_dtype, A.d_words,
                                        B.d_ops};
        return fp8gemm::launch_fp8_grouped_gemm_wgrad(p, cfg, 0);
      };
    };
    CUDA_CHECK(run_twice(launch_as(fp8gemm::OutDtype::kF32), d, d2, d_elems * 4));
    CUDA_CHECK(cudaMemcpy(h.data(), d, d_elems * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(h2.data(), d2, d_elems * 4, cudaMemcpyDeviceToHost));
    Checker c;
    long long nonzero_empty = 0;
    for (int gi = 0; gi < g; ++gi) {
      const float* out = &h[static_cast<size_t>(gi) * m * n];
      if (tok0[gi] == tok1[gi]) {  // empty group: every element exactly zero (all of them, always)
        for (size_t e = 0; e < static_cast<size_t>(m) * n; ++e) nonzero_empty += out[e] != 0.0f;
        continue;
      }
      for (size_t i = 0; i < rows.size(); ++i)
        for (size_t j = 0; j < cols.size(); ++j)
          c.add(out[static_cast<size_t>(rows[i]) * n + cols[j]], ref[(gi * rows.size() + i) * cols.size() + j]);
    }
    char what[200];
    std::snprintf(what, sizeof(what), "k-grouped M=%d N=%d T=%d G=%d [%s] %s %s", m, n, t, g, sz.c_str(),
                  cfg_name(cfg).c_str(), full ? "full" : "sampled");
    c.finish(what);
    if (nonzero_empty) {
      std::printf("  %-64s FAIL %lld non-zero elements in empty groups\n", what, nonzero_empty);
      ++g_failures;
    }
    check_deterministic(h, h2, m, n, what);
    if (n % 8 == 0) check_bf16_output(launch_as(fp8gemm::OutDtype::kBF16), h, d, d2, what);
  }
  cudaFree(d);
  cudaFree(d2);
  cudaFree(d_sizes);
  A.free_device();
  B.free_device();
}

void test_rejections() {
  const GemmConfig ok{128, 128, 0, 0, 1};
  WgradGemmProblem p{reinterpret_cast<void*>(256), reinterpret_cast<void*>(256), reinterpret_cast<float*>(256), 128,
                     reinterpret_cast<float*>(256), 128, reinterpret_cast<float*>(256), 128, 128, 256};
  struct Case { const char* what; WgradGemmProblem p; GemmConfig cfg; };
  std::vector<Case> cases;
  auto with = [&](auto f) { WgradGemmProblem q = p; f(q); return q; };
  cases.push_back({"multicast 4", p, GemmConfig{128, 128, 0, 0, 4}});
  cases.push_back({"multicast_a without a cluster", p, GemmConfig{128, 128, 0, 0, 1, 1}});
  cases.push_back({"uncompiled tile", p, GemmConfig{128, 144, 0, 0, 1}});
  cases.push_back({"one stage", p, GemmConfig{128, 128, 1, 0, 1}});
  cases.push_back({"T % 16", with([](WgradGemmProblem& q) { q.t = 200; }), ok});
  cases.push_back({"T == 0", with([](WgradGemmProblem& q) { q.t = 0; }), ok});
  cases.push_back({"N % 4", with([](WgradGemmProblem& q) { q.n = 126; }), ok});
  cases.push_back({"bf16 out, N % 8", with([](WgradGemmProblem& q) { q.n = 124, q.out_dtype = fp8gemm::OutDtype::kBF16; }), ok});
  cases.push_back({"sfa_ld < M", with([](WgradGemmProblem& q) { q.sfa_ld = 64; }), ok});
  cases.push_back({"sfb_ld % 4", with([](WgradGemmProblem& q) { q.sfb_ld = 130; }), ok});
  cases.push_back({"256x96 without the scale operands", p, GemmConfig{256, 96, 0, 0, 1}});
  cases.push_back({"256x96 without A's scale operand",
                   with([](WgradGemmProblem& q) { q.sfb_ops = reinterpret_cast<void*>(256); }), GemmConfig{256, 96, 0, 0, 1}});
  for (const Case& c : cases) {
    const cudaError_t err = fp8gemm::launch_fp8_gemm_wgrad(c.p, c.cfg, 0);
    if (err != cudaErrorInvalidValue) {
      std::printf("  rejection %-40s FAIL (got %s)\n", c.what, cudaGetErrorName(err));
      ++g_failures;
    }
  }
  GroupedWgradGemmProblem gp{p.a, p.b, p.sfa, p.sfa_ld, p.sfb, p.sfb_ld, p.d, 128, 128, 256, 2, nullptr};
  if (fp8gemm::launch_fp8_grouped_gemm_wgrad(gp, ok, 0) != cudaErrorInvalidValue) {
    std::printf("  rejection %-40s FAIL\n", "null group sizes");
    ++g_failures;
  }
  gp.group_sizes = reinterpret_cast<const int*>(256);  // N = 128: one N-block, no pairs of them
  const GemmConfig k_grouped_bad[] = {{128, 128, 0, 0, 2, 1}, {256, 128, 0, 0, 2, 0}};
  for (const GemmConfig& cfg : k_grouped_bad)
    if (fp8gemm::launch_fp8_grouped_gemm_wgrad(gp, cfg, 0) != cudaErrorInvalidValue) {
      std::printf("  rejection %-40s FAIL (%s)\n", "k-grouped in CTA pairs", cfg_name(cfg).c_str());
      ++g_failures;
    }
  if (fp8gemm::launch_fp8_grouped_gemm_wgrad(gp, GemmConfig{256, 96, 0, 0, 1}, 0) != cudaErrorInvalidValue) {
    std::printf("  rejection %-40s FAIL\n", "k-grouped 256x96 without the scale operands");
    ++g_failures;
  }
  (void)cudaGetLastError();
  std::printf("  rejections: %zu cases checked\n", cases.size() + 4);
}

// ------------------------------------------------------------------------------------------------
// Timing
// ------------------------------------------------------------------------------------------------
// Device-only operands for timing (random bytes; values are irrelevant to the timing, scales 1).
struct DeviceOperand {
  uint8_t* q = nullptr;
  float* s = nullptr;
  uint32_t* words = nullptr;  // scale_operand_a (when this is A)
  uint16_t* ops = nullptr;    // scale_operand_b (when this is B)
  int ld = 0;
  DeviceOperand(int rows, int t) {
    ld = (rows + 3) / 4 * 4;
    const size_t bytes = static_cast<size_t>(rows) * t;
    std::vector<uint8_t> h(bytes);
    for (size_t i = 0; i < bytes; ++i) h[i] = random_e4m3(mix(9, i, rows));
    q = device_copy(h);
    const std::vector<float> ones(static_cast<size_t>(cdiv(t, 128)) * ld, 1.0f);
    s = device_copy(ones);
    words = device_copy(scale_operand_a(ones));
    ops = device_copy(scale_operand_b(ones, cdiv(t, 128), rows, ld));
  }
  ~DeviceOperand() {
    cudaFree(q);
    cudaFree(s);
    cudaFree(words);
    cudaFree(ops);
  }
};

struct BenchOptions {
  int runs = 20;
  int m = 0, n = 0, t = 0;     // --shape: one dense problem instead of the default cases
  int tile_m = 0, tile_n = 0;  // --tile: one tile only
  int groups = 0, mean = 0;    // --moe=GxMEANxMxN: one k-grouped MoE-like problem (even, MoE, padded)
  int multicast = 1, multicast_a = 0;  // --multicast=1|2A|2B
  fp8gemm::OutDtype out = fp8gemm::OutDtype::kF32;  // --out=bf16: time the bf16-output kernels
};

// The tiles timed: the throughput tiles (block_m >= 128), or the one --tile names.
bool bench_tile(const BenchOptions& o, const fp8gemm::CompiledTile& tile) {
  if (o.tile_m) return tile.block_m == o.tile_m && tile.block_n == o.tile_n;
  return tile.block_m >= 128;  // the small-M tile is not a throughput config
}

// MoE-like group sizes: G x mean tokens over experts of log-normal popularity (sigma 0.3, as
// session 64's probes), so that group boundaries fall inside 128-token blocks. Deterministic.
std::vector<int> moe_sizes(int g, int mean) {
  std::vector<double> w(g);
  double sum = 0;
  for (int i = 0; i < g; ++i) {
    // Box-Muller from two hashes.
    const double u1 = (mix(11, i, 0) + 1.0) / 4294967297.0, u2 = mix(11, i, 1) / 4294967296.0;
    w[i] = std::exp(0.3 * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    sum += w[i];
  }
  std::vector<int> sizes(g);
  int total = 0;
  for (int i = 0; i < g; ++i) total += sizes[i] = static_cast<int>(w[i] / sum * g * mean);
  for (int i = 0; total < g * mean; i = (i + 1) % g) ++sizes[i], ++total;
  return sizes;
}

// --moe: one k-grouped problem with even, MoE-like and MoE-padded-to-128 sizes; with a timeline
// build, where each kernel's tiles spend their time.
void bench_moe(const BenchOptions& o) {
  const int g = o.groups, mean = o.mean, m = o.m, n = o.n;
  const std::vector<int> even(g, mean), moe = moe_sizes(g, mean);
  std::vector<int> padded(moe);
  int t = 0, t_padded = 0;
  for (int i = 0; i < g; ++i) padded[i] = (moe[i] + 127) / 128 * 128, t += moe[i], t_padded += padded[i];
  DeviceOperand A(m, t_padded), B(n, t_padded);
  void* d;
  CUDA_CHECK(cudaMalloc(&d, static_cast<size_t>(g) * m * n * 4));
  const L2Flush flush(size_t(256) << 20);
  const double flops = 2.0 * m * n * t;  // the real tokens
  const std::vector<int>* const cases[] = {&even, &moe, &padded};
  for (const std::vector<int>* sizes : cases) {
    int* d_sizes = device_copy(*sizes);
    const char* kind = sizes == &even ? "even" : sizes == &moe ? "moe" : "padded";
    for (const fp8gemm::CompiledTile& tile : fp8gemm::kCompiledWgradTiles) {
      if (!bench_tile(o, tile)) continue;
      const GemmConfig cfg{tile.block_m, tile.block_n, 0, 0, o.multicast, o.multicast_a};
      GroupedWgradGemmProblem p{A.q, B.q, A.s, A.ld, B.s, B.ld, d, m, n, t_padded, g, d_sizes, o.out, A.words, B.ops};
      auto launch = [&] { return fp8gemm::launch_fp8_grouped_gemm_wgrad(p, cfg, 0); };
      const double ms = median_ms(launch, /*warmup=*/2, o.runs, flush);
      std::printf("  bench moe G=%d x %d (%s) M=%d N=%d %s %-22s %9.1f us %7.1f TFLOP/s\n", g, mean, kind, m, n,
                  o.out == fp8gemm::OutDtype::kBF16 ? "bf16" : "f32", cfg_name(cfg).c_str(), ms * 1e3,
                  flops / ms / 1e9);
      std::fflush(stdout);
#ifdef FP8GEMM_EXPERIMENT_TIMELINE
      CUDA_CHECK(cudaMemset(flush.buf, 1, flush.bytes));
      print_timeline((std::string(kind) + " " + cfg_name(cfg)).c_str(), launch);
#endif
    }
    cudaFree(d_sizes);
  }
  cudaFree(d);
}

void bench(const BenchOptions& o) {
  const int runs = o.runs;
  const L2Flush flush(size_t(256) << 20);
  std::printf("\nbest per case (%s out, median of %d runs, L2 flushed; DeepGEMM reference: ~1092 dense, ~1044 "
              "k-grouped)\n", o.out == fp8gemm::OutDtype::kBF16 ? "bf16" : "f32", runs);
  struct Dense { int m, n, t; };
  std::vector<Dense> dense_cases = {{7168, 7168, 4096}, {7168, 7168, 8192}, {4096, 7168, 4096}, {4096, 7168, 8192}};
  if (o.m > 0) dense_cases = {{o.m, o.n, o.t}};
  for (const Dense& c : dense_cases) {
    DeviceOperand A(c.m, c.t), B(c.n, c.t);
    float* d;
    CUDA_CHECK(cudaMalloc(&d, static_cast<size_t>(c.m) * c.n * 4));
    const double flops = 2.0 * c.m * c.n * c.t;
    double best = 0;
    std::string best_cfg;
    for (const fp8gemm::CompiledTile& tile : fp8gemm::kCompiledWgradTiles) {
      if (!bench_tile(o, tile)) continue;
      const GemmConfig cfg{tile.block_m, tile.block_n, 0, 0, o.multicast, o.multicast_a};
      WgradGemmProblem p{A.q, B.q, A.s, A.ld, B.s, B.ld, d, c.m, c.n, c.t, o.out, A.words, B.ops};
      const double ms = median_ms([&] { return fp8gemm::launch_fp8_gemm_wgrad(p, cfg, 0); }, /*warmup=*/2, runs, flush);
      const double tflops = flops / ms / 1e9;
      std::printf("  dense     M=%d N=%d T=%d  %-22s %8.3f ms %7.1f TFLOP/s\n", c.m, c.n, c.t, cfg_name(cfg).c_str(),
                  ms, tflops);
      if (tflops > best) best = tflops, best_cfg = cfg_name(cfg);
    }
    std::printf("  => dense M=%d N=%d T=%d best %.1f TFLOP/s (%s)\n", c.m, c.n, c.t, best, best_cfg.c_str());
    cudaFree(d);
  }
  if (o.m == 0) {
    const int m = 4096, n = 7168, g = 8, per = 4096, t = g * per;
    DeviceOperand A(m, t), B(n, t);
    float* d;
    CUDA_CHECK(cudaMalloc(&d, static_cast<size_t>(g) * m * n * 4));
    // Even sizes (every group on whole blocks), uneven ones (+-30%, one empty, same sum) with
    // every group boundary inside a block, and the same rounded to whole blocks.
    const std::vector<int> even(g, per), uneven = {4096 + 1229, 4096 - 1001, 0, 4096 + 777,
                                                   4096 + 1100, 4096 - 555, 4096 + 1117, 4096 + 1429};
    const std::vector<int> uneven_blocks = {5376, 3072, 0, 4864, 5248, 3584, 5248, 5376};
    for (const std::vector<int>* sizes : {&even, &uneven, &uneven_blocks}) {
      int* d_sizes = device_copy(*sizes);
      const char* kind = sizes == &even ? "even" : sizes == &uneven ? "uneven" : "uneven, whole blocks";
      const double flops = 2.0 * m * n * t;
      double best = 0;
      std::string best_cfg;
      for (const fp8gemm::CompiledTile& tile : fp8gemm::kCompiledWgradTiles) {
        if (!bench_tile(o, tile)) continue;
        const GemmConfig cfg{tile.block_m, tile.block_n, 0, 0, o.multicast, o.multicast_a};
        GroupedWgradGemmProblem p{A.q, B.q, A.s, A.ld, B.s, B.ld, d, m, n, t, g, d_sizes, o.out, A.words, B.ops};
        const double ms =
            median_ms([&] { return fp8gemm::launch_fp8_grouped_gemm_wgrad(p, cfg, 0); }, /*warmup=*/2, runs, flush);
        const double tflops = flops / ms / 1e9;
        std::printf("  k-grouped G=%d x %d tokens (%s) M=%d N=%d  %-22s %8.3f ms %7.1f TFLOP/s\n", g, per, kind, m,
                    n, cfg_name(cfg).c_str(), ms, tflops);
        if (tflops > best) best = tflops, best_cfg = cfg_name(cfg);
      }
      std::printf("  => k-grouped G=%d x %d (%s) M=%d N=%d best %.1f TFLOP/s (%s)\n", g, per, kind, m, n, best,
                  best_cfg.c_str());
      cudaFree(d_sizes);
    }
    cudaFree(d);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool small = false, no_bench = false, bench_only = false;
  BenchOptions bench_options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--small") small = true;
    else if (arg == "--no-bench") no_bench = true;
    else if (arg == "--bench-only") bench_only = true;
    else if (arg.rfind("--seed=", 0) == 0) g_seed = std::strtoull(arg.c_str() + 7, nullptr, 10);
    else if (arg.rfind("--runs=", 0) == 0) bench_options.runs = std::max(1, std::atoi(arg.c_str() + 7));
    else if (arg.rfind("--shape=", 0) == 0)
      std::sscanf(arg.c_str() + 8, "%dx%dx%d", &bench_options.m, &bench_options.n, &bench_options.t);
    else if (arg.rfind("--moe=", 0) == 0)
      std::sscanf(arg.c_str() + 6, "%dx%dx%dx%d", &bench_options.groups, &bench_options.mean, &bench_options.m,
                  &bench_options.n);
    else if (arg == "--out=bf16") bench_options.out = fp8gemm::OutDtype::kBF16;
    else if (arg == "--multicast=2A" || arg == "--multicast=2B")
      bench_options.multicast = 2, bench_options.multicast_a = arg == "--multicast=2A";
    else if (arg.rfind("--tile=", 0) == 0)
      std::sscanf(arg.c_str() + 7, "%dx%d", &bench_options.tile_m, &bench_options.tile_n);
    else {
      std::fprintf(stderr, "unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  std::printf("wgrad standalone test, seed %llu\n", static_cast<unsigned long long>(g_seed));
  // --moe times its problem instead of the default cases.
  auto run_bench = [&] {
    if (bench_options.groups > 0)
      bench_moe(bench_options);
    else
      bench(bench_options);
  };
  if (bench_only) {
    run_bench();
    return 0;
  }
  test_rejections();

  // Dense: full checks on small shapes (partial k-block, ragged M / N edges), sampled on big ones.
  test_dense(200, 264, 400, true);  // T % 128 != 0, M % 64 != 0, N % 112 / 128 != 0
  test_dense(64, 128, 128, true);
  test_dense(72, 16, 16, true);     // one partial k-block, N smaller than a tile
  // k-grouped: uneven sizes incl. empty groups (first, middle, last), G = 1, a tail of unused
  // tokens, sizes running past T (cut), M not a multiple of 64 (the masked row epilogue); groups
  // starting and ending inside 128-token blocks (shared blocks masked per group), several groups
  // inside one block, T not a multiple of 128.
  test_grouped(136, 144, 1024, {256, 0, 128, 384, 0}, true);
  test_grouped(130, 40, 512, {512}, true);             // G = 1, all tokens
  test_grouped(64, 128, 640, {0, 128, 0}, true);       // tail tokens unused
  test_grouped(100, 96, 384, {256, 256, 128}, true);   // runs past T: last group cut to nothing
  test_grouped(136, 144, 1040, {50, 0, 130, 1, 16, 300, 7, 200}, true);  // unaligned, T % 128 = 16
  test_grouped(72, 112, 400, {-3, 17, 33, 64, 1, 500}, true);  // several per block; negative; past T
  test_grouped(200, 48, 256, {127, 1, 0, 128}, true);  // ends one token short of / past a block edge
  if (!small) {
    test_dense(1000, 2056, 1040, false);
    test_dense(4096, 7168, 4096, false);
    test_grouped(520, 776, 4096, {1024, 0, 128, 1152, 256, 0, 768, 640}, false);
    test_grouped(520, 776, 4096, {1000, 0, 141, 1200, 255, 3, 760, 737}, false);
    test_grouped(520, 1024, 4096, {1000, 0, 141, 1200, 255, 3, 760, 737}, false);  // pairs: 8 N-blocks
    test_grouped(4096, 7168, 8 * 1024, {1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024}, false);
    std::vector<int> many(33, 128), many_odd(256);
    for (int i = 0; i < 33; i += 4) many[i] = 0;
    test_grouped(256, 384, 33 * 128, many, false);
    for (int i = 0; i < 256; ++i) many_odd[i] = static_cast<int>(mix(5, i, 0) % 40u);  // 256 groups, ~20 tokens
    test_grouped(192, 256, 5120, many_odd, false);
    if (!no_bench) run_bench();
  }
  std::printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "PASSED", g_failures);
  return g_failures ? 1 : 0;
}
