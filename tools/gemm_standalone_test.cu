// Standalone correctness + performance test of the sm90 block-scaled FP8 GEMM (no JAX needed).
//
// Build (from the repository root):
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 --expt-relaxed-constexpr -Icuda
//        tools/gemm_standalone_test.cu cuda/gemm/fp8_gemm.cu cuda/gemm/fp8_gemm_inst_*.cu
//        -o build/gemm_standalone_test
//
// Usage: gemm_standalone_test [--small] [--quick] [--no-bench] [--bench-only] [--tile=BMxBN]
//                             [--seed=N] [--runs=N] [--shape=MxNxK] [--multicast=1|2B|2A] [--out=f32]
//   --small       tiny shapes only, no benchmark (for compute-sanitizer memcheck / racecheck)
//   --quick       a reduced shape list instead of the full cross product
//   --no-bench    correctness only;  --bench-only: timing only (still checks the timed outputs)
//   --tile=BMxBN  only this tile shape
//   --out=f32     time the f32-output kernels (default bf16)
//   --normal      operands drawn from a standard normal instead of uniform [-1, 1) (the tensor
//                 cores' power, and so the clock of a power-bound kernel, depends on the data)
//
// Correctness, per shape and per compiled configuration (tile x out dtype x multicast, plus
// variants with a shallow pipeline and few SMs so that the stage ring wraps across many tiles):
//   * A, B: random floats (per-row / per-block magnitudes spanning 2^-6..2^6), quantized on the host
//     to e4m3 with 1x128 (A) / 128x128 (B) scales = amax / 448 (so scales are random positive).
//   * D poisoned with 0xFF bytes (NaN) before every run: every element must be written (no NaN).
//   * calc_diff(D, ref) = 1 - 2*sum(x*y)/sum(x*x+y*y) <= 1e-5 against a float64 host reference of
//     the dequantized math (all elements for small shapes, a sample of rows x cols incl. the edges
//     for big ones).
//   * two runs must be bitwise identical.
// Exit code: 0 iff every check passed.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gemm/fp8_gemm.h"
#include "harness_common.cuh"
#include "timeline_summary.h"

using fp8gemm::GemmConfig;
using fp8gemm::GemmProblem;
using fp8gemm::OutDtype;

namespace {

uint8_t to_fp8(float x) { return static_cast<uint8_t>(__nv_fp8_e4m3(x).__x); }

bool g_normal_data = false;  // --normal
float draw(Rng& rng) { return g_normal_data ? rng.normal() : rng.symmetric(); }

// ------------------------------------------------------------------------------------------------
// Problem data
// ------------------------------------------------------------------------------------------------

struct HostData {
  int m = 0, n = 0, k = 0, kb = 0, nb = 0, sfa_ld = 0;
  std::vector<uint8_t> a, b;  // e4m3 bytes
  std::vector<float> sfa;     // [kb][sfa_ld]
  std::vector<float> sfb;     // [nb][kb]
};

void generate(HostData& h, int m, int n, int k, uint64_t seed) {
  h.m = m, h.n = n, h.k = k;
  h.kb = cdiv(k, 128), h.nb = cdiv(n, 128), h.sfa_ld = cdiv(m, 4) * 4;
  h.a.assign(static_cast<size_t>(m) * k, 0);
  h.b.assign(static_cast<size_t>(n) * k, 0);
  // Padding rows of SFA (m in [M, sfa_ld)) are poisoned: the kernel must never read them.
  h.sfa.assign(static_cast<size_t>(h.kb) * h.sfa_ld, std::nanf(""));
  h.sfb.assign(static_cast<size_t>(h.nb) * h.kb, 0.f);
  const int kb_count = h.kb;

  // A: 1x128 groups. Row magnitude 2^[-6, 6) and a per-group factor in [0.25, 1].
  parallel_for(m, [&](int row) {
    Rng rng(seed * 1000003ull + static_cast<uint64_t>(row));
    const float row_mag = std::ldexp(1.0f, static_cast<int>(rng.uniform_f32() * 12.0f) - 6);
    float tmp[128];
    for (int g = 0; g < kb_count; ++g) {
      const int k0 = g * 128, len = std::min(128, k - k0);
      const float mag = row_mag * (0.25f + 0.75f * rng.uniform_f32());
      float amax = 0.f;
      for (int i = 0; i < len; ++i) {
        tmp[i] = draw(rng) * mag;
        amax = std::max(amax, std::fabs(tmp[i]));
      }
      const float s = amax > 0.f ? amax / 448.f : 1.f;
      h.sfa[static_cast<size_t>(g) * h.sfa_ld + row] = s;
      uint8_t* q = &h.a[static_cast<size_t>(row) * k + k0];
      for (int i = 0; i < len; ++i) q[i] = to_fp8(tmp[i] / s);
    }
  });

  // B: 128x128 blocks, block magnitude 2^[-6, 6).
  parallel_for(h.nb * h.kb, [&](int blk) {
    const int bn = blk / kb_count, bk = blk % kb_count;
    Rng rng(seed * 7919ull + 0x5555ull + static_cast<uint64_t>(blk));
    const float mag = std::ldexp(1.0f, static_cast<int>(rng.uniform_f32() * 12.0f) - 6);
    const int n0 = bn * 128, n1 = std::min(n, n0 + 128);
    const int k0 = bk * 128, k1 = std::min(k, k0 + 128);
    std::vector<float> tmp(static_cast<size_t>(n1 - n0) * (k1 - k0));
    float amax = 0.f;
    for (auto& v : tmp) {
      v = draw(rng) * mag;
      amax = std::max(amax, std::fabs(v));
    }
    const float s = amax > 0.f ? amax / 448.f : 1.f;
    h.sfb[static_cast<size_t>(bn) * kb_count + bk] = s;
    size_t idx = 0;
    for (int r = n0; r < n1; ++r)
      for (int c = k0; c < k1; ++c) h.b[static_cast<size_t>(r) * k + c] = to_fp8(tmp[idx++] / s);
  });
}

struct DeviceData {
  uint8_t *a = nullptr, *b = nullptr;
  float *sfa = nullptr, *sfb = nullptr;
  void *d = nullptr, *d2 = nullptr;  // output and the determinism re-run
  size_t d_bytes = 0;
  void upload(const HostData& h) {
    a = device_copy(h.a), b = device_copy(h.b), sfa = device_copy(h.sfa), sfb = device_copy(h.sfb);
    d_bytes = static_cast<size_t>(h.m) * h.n * 4;  // large enough for f32
    CUDA_CHECK(cudaMalloc(&d, d_bytes));
    CUDA_CHECK(cudaMalloc(&d2, d_bytes));
  }
  void release() {
    cudaFree(a), cudaFree(b), cudaFree(sfa), cudaFree(sfb), cudaFree(d), cudaFree(d2);
    a = b = nullptr, sfa = sfb = nullptr, d = d2 = nullptr;
  }
};

// ------------------------------------------------------------------------------------------------
// Device-side checks (the outputs can be hundreds of MB: count on the GPU, copy back samples only)
// ------------------------------------------------------------------------------------------------

__global__ void count_nan_kernel(const void* d, size_t count, int is_bf16, unsigned long long* nan_count) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (!isfinite(load_out(d, i, is_bf16))) ++local;
  }
  if (local) atomicAdd(nan_count, local);
}

unsigned long long device_count_nan(const void* d, size_t count, bool bf16, unsigned long long* scratch) {
  CUDA_CHECK(cudaMemset(scratch, 0, sizeof(unsigned long long)));
  count_nan_kernel<<<1024, 256>>>(d, count, bf16 ? 1 : 0, scratch);
  CUDA_CHECK(cudaGetLastError());
  unsigned long long h = 0;
  CUDA_CHECK(cudaMemcpy(&h, scratch, sizeof(h), cudaMemcpyDeviceToHost));
  return h;
}

// ------------------------------------------------------------------------------------------------
// Host reference (float64) on a sample of rows x cols
// ------------------------------------------------------------------------------------------------

std::vector<int> sample_indices(int extent, int max_count, uint64_t seed) {
  if (extent <= max_count) {
    std::vector<int> all(extent);
    for (int i = 0; i < extent; ++i) all[i] = i;
    return all;
  }
  std::set<int> s;
  auto add = [&](long v) {
    if (v >= 0 && v < extent) s.insert(static_cast<int>(v));
  };
  add(0), add(1), add(extent - 1), add(extent - 2);
  // Tile / scale-block edges of the compiled block sizes (and a few multiples).
  for (int edge : {32, 64, 112, 128, 144, 160, 176, 224, 256, 288, 320, 352, 448})
    for (long e = edge; e < extent && static_cast<int>(s.size()) < max_count / 2; e += 7L * edge) add(e - 1), add(e);
  Rng rng(seed);
  while (static_cast<int>(s.size()) < max_count) add(static_cast<long>(rng.next() % static_cast<uint64_t>(extent)));
  return std::vector<int>(s.begin(), s.end());
}

struct Reference {
  std::vector<int> rows, cols;
  std::vector<double> values;  // [rows][cols]
};

Reference compute_reference(const HostData& h, bool full) {
  Reference r;
  r.rows = full ? sample_indices(h.m, h.m, 1) : sample_indices(h.m, 40, 11);
  r.cols = full ? sample_indices(h.n, h.n, 2) : sample_indices(h.n, 192, 22);
  const int nr = static_cast<int>(r.rows.size()), nc = static_cast<int>(r.cols.size());
  r.values.assign(static_cast<size_t>(nr) * nc, 0.0);
  const float* lut = fp8_lut();
  // Decode the sampled B rows once.
  std::vector<float> bdec(static_cast<size_t>(nc) * h.k);
  parallel_for(nc, [&](int j) {
    const uint8_t* src = &h.b[static_cast<size_t>(r.cols[j]) * h.k];
    for (int kk = 0; kk < h.k; ++kk) bdec[static_cast<size_t>(j) * h.k + kk] = lut[src[kk]];
  });
  parallel_for(nr, [&](int i) {
    const int row = r.rows[i];
    std::vector<float> adec(h.k);
    for (int kk = 0; kk < h.k; ++kk) adec[kk] = lut[h.a[static_cast<size_t>(row) * h.k + kk]];
    for (int j = 0; j < nc; ++j) {
      const int col = r.cols[j];
      const float* bv = &bdec[static_cast<size_t>(j) * h.k];
      double acc = 0.0;
      for (int g = 0; g < h.kb; ++g) {
        const int k0 = g * 128, k1 = std::min(h.k, k0 + 128);
        double s = 0.0;  // products of two e4m3 are exact in float; the sum is exact in double
        for (int kk = k0; kk < k1; ++kk) s += static_cast<double>(adec[kk] * bv[kk]);
        acc += s * static_cast<double>(h.sfa[static_cast<size_t>(g) * h.sfa_ld + row]) *
               static_cast<double>(h.sfb[static_cast<size_t>(col / 128) * h.kb + g]);
      }
      r.values[static_cast<size_t>(i) * nc + j] = acc;
    }
  });
  return r;
}

// ------------------------------------------------------------------------------------------------
// Configurations
// ------------------------------------------------------------------------------------------------

struct Options {
  bool small = false, quick = false, bench = true, check = true;
  int shape_m = 0, shape_n = 0, shape_k = 0;  // --shape=MxNxK: only this problem
  int tile_m = 0, tile_n = 0;
  std::string multicast;  // --multicast=1|2B|2A: only this multicast mode (default: all)
  OutDtype bench_out = OutDtype::kBF16;  // --out=f32: time f32 output instead of bf16
  uint64_t seed = 1234;
  int runs = 25;
  int sms = 0;  // --sms=N: CTAs of every variant that takes the device's (e.g. a halved tail on a small problem)
};

// (multicast, multicast_a): none, pairs sharing B, pairs sharing A.
constexpr std::pair<int, int> kMulticastModes[] = {{1, 0}, {2, 0}, {2, 1}};

bool multicast_selected(const Options& o, int mc, int mc_a) {
  if (o.multicast.empty()) return true;
  return o.multicast == (mc == 1 ? "1" : (mc_a ? "2A" : "2B"));
}

// The pipeline-free decode GEMMs' pseudo-tiles, on the CUDA cores (M <= kGemvMaxM) and on mma.sync
// (M <= kGemvMmaMaxM); larger M skips them. Run unless --tile picks another.
const GemmConfig kGemv{fp8gemm::kGemvMaxM, fp8gemm::kGemvRows, 0, 0, 1};
const GemmConfig kGemvMma{fp8gemm::kGemvMmaMaxM, fp8gemm::kGemvMmaRows, 0, 0, 1};
const GemmConfig kPipelineFree[] = {kGemv, kGemvMma};
bool tile_selected(const Options& o, const GemmConfig& c) {
  return !o.tile_m || (o.tile_m == c.block_m && o.tile_n == c.block_n);
}

std::vector<Variant> correctness_variants(const Options& o) {
  std::vector<Variant> v;
  for (const GemmConfig& c : kPipelineFree)
    if (tile_selected(o, c) && multicast_selected(o, 1, 0))
      for (OutDtype out : {OutDtype::kBF16, OutDtype::kF32}) v.push_back({c, out});
  for (const auto& t : fp8gemm::kCompiledTiles) {
    if (o.tile_m && (t.block_m != o.tile_m || t.block_n != o.tile_n)) continue;
    for (OutDtype out : {OutDtype::kBF16, OutDtype::kF32}) {
      if (!fp8gemm::is_compiled(GemmConfig{t.block_m, t.block_n, 0, 0, 1}, out)) continue;  // 256-row f32
      for (const auto& [mc, mc_a] : kMulticastModes) {
        if (!multicast_selected(o, mc, mc_a)) continue;
        v.push_back({GemmConfig{t.block_m, t.block_n, 0, 0, mc, mc_a}, out});
        // Shallow ring + few CTAs: many tiles per CTA, stage/phase wrap at odd positions.
        const int shallow = std::min(3, fp8gemm::max_stages(t.block_m, t.block_n, out));  // 256x128 f32: 2
        v.push_back({GemmConfig{t.block_m, t.block_n, shallow, mc == 2 ? 6 : 5, mc, mc_a}, out});
      }
      // Split-K (is_split_k_tile; selected with --multicast=1): uneven k-ranges, empty ones when K
      // has fewer k-blocks than splits, a shallow ring.
      if (fp8gemm::is_split_k_tile(t.block_m, t.block_n) && multicast_selected(o, 1, 0)) {
        for (int ks = 2; ks <= fp8gemm::kMaxKSplits; ++ks) {
          v.push_back({GemmConfig{t.block_m, t.block_n, 0, 0, 1, 0, ks}, out});
          v.push_back({GemmConfig{t.block_m, t.block_n, 2, 0, 1, 0, ks}, out});
        }
      }
    }
  }
  return v;
}

std::vector<Variant> bench_variants(const Options& o) {
  std::vector<Variant> v;
  for (const GemmConfig& c : kPipelineFree)
    if (tile_selected(o, c) && multicast_selected(o, 1, 0)) v.push_back({c, o.bench_out});
  for (const auto& t : fp8gemm::kCompiledTiles) {
    if (o.tile_m && (t.block_m != o.tile_m || t.block_n != o.tile_n)) continue;
    for (const auto& [mc, mc_a] : kMulticastModes)
      if (multicast_selected(o, mc, mc_a) && fp8gemm::is_compiled(GemmConfig{t.block_m, t.block_n, 0, 0, mc, mc_a}, o.bench_out))
        v.push_back({GemmConfig{t.block_m, t.block_n, 0, 0, mc, mc_a}, o.bench_out});
    if (fp8gemm::is_split_k_tile(t.block_m, t.block_n) && multicast_selected(o, 1, 0))
      for (int ks = 2; ks <= fp8gemm::kMaxKSplits; ++ks) v.push_back({GemmConfig{t.block_m, t.block_n, 0, 0, 1, 0, ks}, o.bench_out});
  }
  return v;
}

GemmProblem make_problem(const HostData& h, const DeviceData& dd, void* d, OutDtype out) {
  GemmProblem p;
  p.a = dd.a, p.b = dd.b, p.sfa = dd.sfa, p.sfa_ld = h.sfa_ld, p.sfb = dd.sfb, p.d = d;
  p.out_dtype = out, p.m = h.m, p.n = h.n, p.k = h.k;
  return p;
}

struct Shape {
  int m, n, k;
  bool bench;
};

// ------------------------------------------------------------------------------------------------
// Test driver
// ------------------------------------------------------------------------------------------------

void check_shape(const HostData& h, DeviceData& dd, const std::vector<Variant>& variants,
                 unsigned long long* scratch) {
  const bool full = static_cast<double>(h.m) * h.n * h.k <= 3.0e8;
  const Reference ref = compute_reference(h, full);
  const int nr = static_cast<int>(ref.rows.size()), nc = static_cast<int>(ref.cols.size());
  int *d_rows = nullptr, *d_cols = nullptr;
  float* d_samples = nullptr;
  CUDA_CHECK(cudaMalloc(&d_rows, nr * sizeof(int)));
  CUDA_CHECK(cudaMalloc(&d_cols, nc * sizeof(int)));
  CUDA_CHECK(cudaMalloc(&d_samples, static_cast<size_t>(nr) * nc * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(d_rows, ref.rows.data(), nr * sizeof(int), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_cols, ref.cols.data(), nc * sizeof(int), cudaMemcpyHostToDevice));
  std::vector<float> samples(static_cast<size_t>(nr) * nc);

  for (const Variant& v : variants) {
    const bool bf16 = v.out == OutDtype::kBF16;
    const size_t out_bytes = static_cast<size_t>(h.m) * h.n * (bf16 ? 2 : 4);
    if ((static_cast<long long>(h.n) * (bf16 ? 2 : 4)) % 16 != 0) continue;  // unsupported by contract
    if (fp8gemm::is_gemv(v.cfg) && h.m > fp8gemm::kGemvMaxM) continue;
    if (fp8gemm::is_gemv_mma(v.cfg) && h.m > fp8gemm::kGemvMmaMaxM) continue;
    ++g_checks;
    std::string why;
    const cudaError_t err = run_twice(
        [&](void* d) { return fp8gemm::launch_fp8_gemm(make_problem(h, dd, d, v.out), v.cfg, 0); }, dd.d, dd.d2,
        out_bytes);
    double diff = -1;
    if (err != cudaSuccess) {
      why = std::string("launch/run error ") + cudaGetErrorName(err);
      if (err != cudaErrorInvalidValue) {  // a kernel fault poisons the context: stop here
        std::printf("FAIL %5d x %5d x %5d  %-28s %s\n", h.m, h.n, h.k, v.name().c_str(), why.c_str());
        std::exit(3);
      }
    } else {
      const unsigned long long nans = device_count_nan(dd.d, static_cast<size_t>(h.m) * h.n, bf16, scratch);
      const unsigned long long mism = device_count_mismatch(dd.d, dd.d2, out_bytes, scratch);
      const int total = nr * nc;
      gather_kernel<<<cdiv(total, 256), 256>>>(dd.d, h.n, bf16 ? 1 : 0, d_rows, d_cols, nr, nc, d_samples);
      CUDA_CHECK(cudaGetLastError());
      CUDA_CHECK(cudaMemcpy(samples.data(), d_samples, samples.size() * sizeof(float), cudaMemcpyDeviceToHost));
      diff = calc_diff(samples, ref.values);
      if (nans) why += "non-finite/unwritten elements: " + std::to_string(nans) + "; ";
      if (mism) why += "non-deterministic bytes: " + std::to_string(mism) + "; ";
      if (!(diff <= 1e-5)) why += "calc_diff too large; ";
      if (!why.empty()) {
        // Locate the worst sampled element for the log.
        double worst = 0;
        int wi = 0;
        for (int i = 0; i < total; ++i) {
          const double e = std::fabs(samples[i] - ref.values[i]) / (std::fabs(ref.values[i]) + 1e-30);
          if (!(e <= worst)) worst = e, wi = i;
        }
        char buf[160];
        std::snprintf(buf, sizeof(buf), "worst rel err %.3g at (%d, %d): got %.6g want %.6g", worst,
                      ref.rows[wi / nc], ref.cols[wi % nc], samples[wi], ref.values[wi]);
        why += buf;
      }
    }
    if (!why.empty()) {
      ++g_failures;
      std::printf("FAIL %5d x %5d x %5d  %-28s diff=%.3g  %s\n", h.m, h.n, h.k, v.name().c_str(), diff, why.c_str());
    }
  }
  std::printf("checked %5d x %5d x %5d (%s reference, %zu variants), failures so far: %d\n", h.m, h.n, h.k,
              full ? "full" : "sampled", variants.size(), g_failures);
  std::fflush(stdout);
  cudaFree(d_rows), cudaFree(d_cols), cudaFree(d_samples);
}

struct BenchRow {
  std::string shape, config;
  double us, tflops, gbps;
};

void bench_shape(const HostData& h, DeviceData& dd, const std::vector<Variant>& variants, int runs,
                 const L2Flush& flush, std::vector<BenchRow>& table) {
  char shape[64];
  std::snprintf(shape, sizeof(shape), "%dx%dx%d", h.m, h.n, h.k);
  for (const Variant& v : variants) {
    const GemmProblem p = make_problem(h, dd, dd.d, v.out);
    if (fp8gemm::launch_fp8_gemm(p, v.cfg, 0) != cudaSuccess) continue;
    const double sec =
        median_ms([&] { return fp8gemm::launch_fp8_gemm(p, v.cfg, 0); }, /*warmup=*/3, runs, flush) * 1e-3;
    const double flops = 2.0 * h.m * h.n * static_cast<double>(h.k);
    const double bytes = static_cast<double>(h.m) * h.k + static_cast<double>(h.n) * h.k +
                         static_cast<double>(h.m) * h.n * (v.out == OutDtype::kBF16 ? 2 : 4);
    table.push_back({shape, v.name(), sec * 1e6, flops / sec * 1e-12, bytes / sec * 1e-9});
    std::printf("  bench %-18s %-30s %9.1f us %8.1f TFLOP/s %8.1f GB/s\n", shape, v.name().c_str(), sec * 1e6,
                flops / sec * 1e-12, bytes / sec * 1e-9);
    std::fflush(stdout);
#ifdef FP8GEMM_EXPERIMENT_TIMELINE
    CUDA_CHECK(cudaMemset(flush.buf, 1, flush.bytes));
    print_timeline(v.name().c_str(), [&] { return fp8gemm::launch_fp8_gemm(p, v.cfg, 0); });
#endif
  }
}

// Launcher contract: bad shapes/configs are rejected with cudaErrorInvalidValue, nothing launched.
void check_rejections(const HostData& h, const DeviceData& dd) {
  auto expect_invalid = [&](GemmProblem p, GemmConfig c, const char* what) {
    expect_rejected(fp8gemm::launch_fp8_gemm(p, c, 0), what);
  };
  const GemmConfig good{128, 128, 0, 0, 1};
  GemmProblem p = make_problem(h, dd, dd.d, OutDtype::kBF16);
  expect_shared_rejections(p, good, [](const GemmProblem& q, const GemmConfig& c) {
    return fp8gemm::launch_fp8_gemm(q, c, 0);
  });
  GemmProblem q = p;
  q.sfa_ld = (p.m + 3) / 4 * 4 + 1;  // >= M but never a multiple of 4
  expect_invalid(q, good, "sfa_ld % 4 != 0");
  q = p;
  q.sfa_ld = p.m - 4;
  if (q.sfa_ld > 0) expect_invalid(q, good, "sfa_ld < M");
  GemmConfig c = good;
  c.block_n = 96;
  expect_invalid(p, c, "uncompiled block_n");
  c = good;
  c.multicast = 4;
  expect_invalid(p, c, "multicast 4");
  c = good;
  c.multicast_a = 1;  // sharing A needs a cluster of 2
  expect_invalid(p, c, "multicast_a without a cluster");
  c = good;
  c.k_splits = 2;  // split-K: 64 / 128 x 32 / 64 tiles only
  expect_invalid(p, c, "k_splits with a 128x128 tile");
  c = GemmConfig{64, 64, 0, 0, 1, 0, fp8gemm::kMaxKSplits + 1};
  expect_invalid(p, c, "k_splits past kMaxKSplits");
  c = GemmConfig{64, 128, 0, 0, 1, 0, 2};
  expect_invalid(p, c, "k_splits on a 64x128 tile");
  c = GemmConfig{64, 64, 0, 0, 2, 0, 2};
  expect_invalid(p, c, "k_splits with multicast");
  expect_invalid(p, kGemv, "the CUDA-core GEMM with M > kGemvMaxM");  // this problem has M >= 8
  c = kGemv;
  c.num_stages = 2;
  expect_invalid(p, c, "the CUDA-core GEMM with stages");
  ++g_checks;
  if (fp8gemm::max_stages(96, 96, OutDtype::kBF16) != 0 || fp8gemm::max_stages(128, 128, OutDtype::kBF16) < 4) {
    ++g_failures;
    std::printf("FAIL max_stages\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--small") o.small = true, o.bench = false;
    else if (a == "--quick") o.quick = true;
    else if (a == "--no-bench") o.bench = false;
    else if (a == "--bench-only") o.check = false;
    else if (a == "--out=f32") o.bench_out = OutDtype::kF32;
    else if (a == "--normal") g_normal_data = true;
    else if (a.rfind("--shape=", 0) == 0) std::sscanf(a.c_str() + 8, "%dx%dx%d", &o.shape_m, &o.shape_n, &o.shape_k);
    else if (a.rfind("--tile=", 0) == 0) std::sscanf(a.c_str() + 7, "%dx%d", &o.tile_m, &o.tile_n);
    else if (a.rfind("--multicast=", 0) == 0) o.multicast = a.substr(12);
    else if (a.rfind("--seed=", 0) == 0) o.seed = std::strtoull(a.c_str() + 7, nullptr, 10);
    else if (a.rfind("--runs=", 0) == 0) o.runs = std::max(20, std::atoi(a.c_str() + 7));
    else if (a.rfind("--sms=", 0) == 0) o.sms = std::atoi(a.c_str() + 6);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  print_device();
  print_tiles("compiled", fp8gemm::kCompiledTiles);

  // Shapes.
  std::vector<Shape> shapes;
  if (o.small) {
    // Few, tiny shapes (every variant runs on each): edges in M, N (incl. straddling B-scale
    // blocks: N=272 = 2 x 128 + 16) and K (1552 = 12 x 128 + 16).
    shapes = {{1, 8, 512, false}, {7, 160, 1552, false}, {63, 272, 512, false}, {129, 272, 1552, false},
              {5, 40, 208, false},   // 2 k-blocks, so split-K 4 has empty k-ranges
              {3, 136, 400, false}};  // the CUDA-core GEMM: M = 3, K = 3 x 128 + 16, N past a scale block
  } else if (o.quick) {
    for (int m : {1, 3, 8, 63, 129, 4095})
      for (int n : {8, 160, 2112, 7168})
        // 400-1936: the short-K twins (1552 and 1936: the fourth on the variants with few CTAs, else
        // the posted loop kernel)
        for (int k : {400, 1008, 1424, 1552, 1936, 7168}) shapes.push_back({m, n, k, false});
  } else {
    const int ms[] = {1, 7, 63, 129, 4095, 4096};
    const int ns[] = {8, 160, 2112, 4096, 7168, 24576};
    const int ks[] = {512, 1552, 7168, 16384};
    for (int m : ms)
      for (int n : ns)
        for (int k : ks) shapes.push_back({m, n, k, false});
  }
  if (o.bench) {
    // The SPEC's performance shapes (bars in notes/peers.md); the first three also get verified.
    const Shape bench_shapes[] = {{4096, 7168, 16384, true}, {8192, 8192, 8192, true}, {4096, 4096, 7168, true},
                                  {4096, 2112, 7168, true},  {4096, 24576, 1536, true}, {4096, 7168, 2048, true},
                                  {4096, 32768, 512, true},  {128, 7168, 16384, true},  {128, 4096, 7168, true},
                                  {64, 2112, 7168, true}};
    for (const Shape& s : bench_shapes) {
      bool found = false;
      for (Shape& t : shapes)
        if (t.m == s.m && t.n == s.n && t.k == s.k) t.bench = found = true;
      if (!found) shapes.push_back(s);
    }
  } else if (!o.check) {
    std::printf("nothing to do\n");
    return 0;
  }
  if (o.shape_m > 0) shapes.assign(1, Shape{o.shape_m, o.shape_n, o.shape_k, o.bench});
  // Small problems first (fast feedback).
  std::stable_sort(shapes.begin(), shapes.end(), [](const Shape& x, const Shape& y) {
    return static_cast<double>(x.m) * x.n * x.k < static_cast<double>(y.m) * y.n * y.k;
  });

  std::vector<Variant> cvars = correctness_variants(o);
  std::vector<Variant> bvars = bench_variants(o);
  for (auto* vars : {&cvars, &bvars})
    for (Variant& v : *vars)
      if (o.sms > 0 && v.cfg.num_sms == 0) v.cfg.num_sms = o.sms;
  unsigned long long* scratch = nullptr;
  CUDA_CHECK(cudaMalloc(&scratch, sizeof(unsigned long long)));
  std::optional<L2Flush> flush;
  if (o.bench) flush.emplace(512ull << 20);
  std::vector<BenchRow> table;

  bool rejections_done = false;
  for (size_t si = 0; si < shapes.size(); ++si) {
    const Shape& s = shapes[si];
    if (!o.check && !s.bench) continue;
    HostData h;
    generate(h, s.m, s.n, s.k, o.seed + si);
    DeviceData dd;
    dd.upload(h);
    if (!rejections_done && s.m >= 8) {
      check_rejections(h, dd);
      rejections_done = true;
    }
    if (o.check || s.bench) check_shape(h, dd, o.check ? cvars : bvars, scratch);
    if (o.bench && s.bench) bench_shape(h, dd, bvars, o.runs, *flush, table);
    dd.release();
  }

  if (!table.empty()) {
    std::printf("\n%-20s %-30s %10s %10s %10s\n", "shape (MxNxK)", "config", "time(us)", "TFLOP/s", "GB/s");
    std::string last;
    double best = 0;
    std::string best_cfg;
    auto flush_best = [&]() {
      if (!last.empty()) std::printf("%-20s best: %s (%.1f TFLOP/s)\n\n", last.c_str(), best_cfg.c_str(), best);
    };
    for (const BenchRow& r : table) {
      if (r.shape != last) {
        flush_best();
        last = r.shape, best = 0;
      }
      if (r.tflops > best) best = r.tflops, best_cfg = r.config;
      std::printf("%-20s %-30s %10.1f %10.1f %10.1f\n", r.shape.c_str(), r.config.c_str(), r.us, r.tflops, r.gbps);
    }
    flush_best();
  }
  cudaFree(scratch);
  std::printf("%d passed, %d failed\n", g_checks - g_failures, g_failures);
  return g_failures == 0 ? 0 : 1;
}
