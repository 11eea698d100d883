// Standalone correctness + performance test of the grouped (MoE) sm90 FP8 GEMMs (no JAX needed):
// launch_fp8_grouped_gemm, contiguous and masked layouts, against a float64 host reference.
//
// Build (from the repository root):
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 --expt-relaxed-constexpr -Icuda
//        tools/grouped_standalone_test.cu cuda/gemm/*.cu -o build/grouped_standalone_test
//
// Usage: grouped_standalone_test [--small] [--no-bench] [--bench-only] [--case=TEXT] [--tiles=LIST] [--seed=N]
//                                 [--runs=N] [--normal]
//   --small       tiny cases only, no benchmark (for compute-sanitizer memcheck / racecheck)
//   --no-bench    correctness only;  --bench-only: the timed cases only (their outputs still checked)
//   --case=TEXT   only the cases whose name contains TEXT (checked: no graph / rejection checks then),
//                 e.g. to tell which case a compute-sanitizer report comes from
//   --tiles=LIST  time only these tiles, e.g. 256x128,128x128 (default: every grouped tile)
//   --normal      A / B codes distributed as normal values quantized with amax / 448 scales (the
//                 tensor cores' power, and so the clock of a power-bound kernel, depends on the data;
//                 the JAX benchmark draws normal values)
// FP8GEMM_RUN_TIME_ORDER=0 / FP8GEMM_SKIP_WAVES=0 in the environment: the static tile order / no skipping
// of a partial tile's empty waves (A/B runs of one build).
//
// Data: generated on the device from a hash of (seed, row, col), so no large host arrays exist:
// A / B are random e4m3 codes with magnitudes 2^-3 .. 30 (never NaN; --normal: see fp8_code),
// scales random positive 2^-4 .. 2^3; the host reference recomputes any element it needs from the
// same hash. Padding columns of SFA (the MN-major ld past the rows) are NaN: the kernel must never
// read them.
//
// Checks, per case and configuration (tiles 256x128 / 128x128 / 64x128, bf16 / f32, all SMs + a shallow
// pipeline on 5 SMs so that every CTA walks many groups):
//   * D is poisoned with 0xFF bytes (NaN) before every run; EVERY element is checked: rows that no
//     group owns (contiguous: past the clamped sum; masked: >= masked_m[g]) must be exactly 0, the
//     others finite;
//   * values: calc_diff <= 1e-5 against the float64 reference plus a per-element bound
//     |x - y| <= 1e-2 * (|y| + rms(row)) (catches a few rows written with the wrong group) -- on
//     every element for small cases, on sampled rows (around group boundaries, random) x columns
//     for the big ones;
//   * two runs are bitwise identical;
//   * a CUDA graph captured once gives the right result after the sizes (device memory) change;
//   * bad problems / configs are rejected with cudaErrorInvalidValue.
// Timing (default, not with --small): the SPEC's grouped shapes, even and uneven (+-30%, empty
// groups) sizes, median over --runs runs with L2 flushed, TFLOP/s over the valid rows.
// Exit code: 0 iff every check passed.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "gemm/fp8_gemm.h"
#include "harness_common.cuh"
#include "timeline_summary.h"  // -DFP8GEMM_EXPERIMENT_TIMELINE builds only (tools/timeline.sh)

using fp8gemm::GemmConfig;
using fp8gemm::GroupedGemmProblem;
using fp8gemm::OutDtype;

namespace {

// ------------------------------------------------------------------------------------------------
// Deterministic data: a hash of (seed, row, col)
// ------------------------------------------------------------------------------------------------

__host__ __device__ inline uint32_t mix3(uint64_t seed, uint64_t a, uint64_t b) {
  const uint64_t z = seed ^ (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full + 0x165667B19E3779F9ull);
  return static_cast<uint32_t>(splitmix64_mix(z) >> 32);
}

// e4m3 code with exponent field 4..11 (|v| in [2^-3, 30]), random sign and mantissa: never NaN.
// normal: the code of x = (sum of the hash's 4 bytes) - 510, nearly normal with sigma 148 (normal
// values scaled by 448 / amax of their 128-block have sigma ~160), saturated at 448; integer
// arithmetic and one rounding, so host and device agree bit for bit.
__host__ __device__ inline uint8_t fp8_code(uint32_t h, bool normal) {
  if (normal) {
    const int x = static_cast<int>((h & 255u) + ((h >> 8) & 255u) + ((h >> 16) & 255u) + (h >> 24)) - 510;
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(static_cast<float>(x), __NV_SATFINITE, __NV_E4M3));
  }
  const uint32_t sign = h & 1u, exp = 4u + ((h >> 1) & 7u), mant = (h >> 4) & 7u;
  return static_cast<uint8_t>((sign << 7) | (exp << 3) | mant);
}
bool g_normal_codes = false;  // --normal

// Positive scale 2^[-4, 3] * [0.5, 1).
__host__ __device__ inline float scale_value(uint32_t h) {
  const int e = static_cast<int>(h & 7u) - 4;
  const float frac = 0.5f + 0.5f * static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
  return ldexpf(frac, e);
}

struct Seeds {
  uint64_t a, b, sfa, sfb;
  explicit Seeds(uint64_t s)
      : a(s * 0x100000001B3ull + 1), b(s * 0x100000001B3ull + 2), sfa(s * 0x100000001B3ull + 3),
        sfb(s * 0x100000001B3ull + 4) {}
};

// dst[r * cols + c] = code(r, c), r < rows.
__global__ void fill_fp8_kernel(uint8_t* dst, long long rows, int cols, uint64_t seed, bool normal) {
  const long long count = rows * cols;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    dst[i] = fp8_code(mix3(seed, static_cast<uint64_t>(i / cols), static_cast<uint64_t>(i % cols)), normal);
}

// SFA, MN-major [kb][ld]: (row, kb) = scale(seed, row, kb) for row < rows, NaN in the padding.
__global__ void fill_sfa_kernel(float* dst, int num_kb, long long rows, long long ld, uint64_t seed) {
  const long long count = num_kb * ld;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long kb = i / ld, row = i % ld;
    dst[i] = row < rows ? scale_value(mix3(seed, static_cast<uint64_t>(row), static_cast<uint64_t>(kb))) : nanf("");
  }
}

// SFB [G * Nb][Kb]: (g * Nb + nb, kb) = scale(seed, g * Nb + nb, kb).
__global__ void fill_sfb_kernel(float* dst, long long rows, int num_kb, uint64_t seed) {
  const long long count = rows * num_kb;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    dst[i] = scale_value(mix3(seed, static_cast<uint64_t>(i / num_kb), static_cast<uint64_t>(i % num_kb)));
}

// ------------------------------------------------------------------------------------------------
// Cases
// ------------------------------------------------------------------------------------------------

struct Case {
  std::string name;
  bool masked = false;
  int g = 0, m = 0, n = 0, k = 0;  // m: total rows M (contiguous) or Mmax (masked)
  std::vector<int> sizes;          // group_sizes / masked_m as passed (unclamped)
  bool bench = false;
  bool bf16_only = false;          // big cases: bf16 output only
  long long rows() const { return masked ? static_cast<long long>(g) * m : m; }
  int kb() const { return cdiv(k, 128); }
  int nb() const { return cdiv(n, 128); }
  long long sfa_ld() const { return (rows() + 3) / 4 * 4; }
};

// Row ownership as the kernels define it: (valid, group) of every output row.
struct RowMap {
  std::vector<int> start, rows;  // per group: first row, clamped rows
  long long total = 0;           // contiguous: rows owned by some group
  const Case* c = nullptr;
  explicit RowMap(const Case& cs) : c(&cs) {
    start.resize(cs.g), rows.resize(cs.g);
    long long off = 0;
    for (int g = 0; g < cs.g; ++g) {
      const int s = std::max(cs.sizes[g], 0);
      if (cs.masked) {
        start[g] = g * cs.m;
        rows[g] = std::min(s, cs.m);
      } else {
        start[g] = static_cast<int>(off);
        rows[g] = static_cast<int>(std::min<long long>(s, cs.m - off));
        off += rows[g];
      }
    }
    total = off;
  }
  // Group owning `row`, or -1 (the row must be zero).
  int group_of(long long row) const {
    if (c->masked) {
      const int g = static_cast<int>(row / c->m);
      return (row - start[g]) < rows[g] ? g : -1;
    }
    if (row >= total) return -1;
    int lo = 0, hi = c->g - 1;  // first group whose end > row
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (start[mid] + rows[mid] > row) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }
  long long valid_rows() const {
    long long v = 0;
    for (int r : rows) v += r;
    return v;
  }
};

// ------------------------------------------------------------------------------------------------
// Device buffers
// ------------------------------------------------------------------------------------------------

struct DeviceData {
  uint8_t *a = nullptr, *b = nullptr;
  float *sfa = nullptr, *sfb = nullptr;
  int* sizes = nullptr;
  int* tile_counter = nullptr;  // the launch's workspace (run-time tile order)
  void *d = nullptr, *d2 = nullptr;
  uint8_t* row_flags = nullptr;  // 1: row owned by a group (finite), 0: must be zero
  size_t d_bytes = 0;

  void create(const Case& c, const Seeds& seeds) {
    const long long rows = c.rows();
    const size_t a_bytes = static_cast<size_t>(rows) * c.k;
    const size_t b_bytes = static_cast<size_t>(c.g) * c.n * c.k;
    CUDA_CHECK(cudaMalloc(&a, std::max<size_t>(a_bytes, 16)));
    CUDA_CHECK(cudaMalloc(&b, std::max<size_t>(b_bytes, 16)));
    CUDA_CHECK(cudaMalloc(&sfa, std::max<size_t>(static_cast<size_t>(c.kb()) * c.sfa_ld() * 4, 16)));
    CUDA_CHECK(cudaMalloc(&sfb, std::max<size_t>(static_cast<size_t>(c.g) * c.nb() * c.kb() * 4, 16)));
    CUDA_CHECK(cudaMalloc(&sizes, std::max<size_t>(static_cast<size_t>(c.g) * 4, 16)));
    CUDA_CHECK(cudaMalloc(&tile_counter, sizeof(int)));
    CUDA_CHECK(cudaMemset(tile_counter, 0x7F, sizeof(int)));  // garbage: the launch must zero it
    d_bytes = static_cast<size_t>(rows) * c.n * 4;  // large enough for f32
    CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(d_bytes, 16)));
    CUDA_CHECK(cudaMalloc(&d2, std::max<size_t>(d_bytes, 16)));
    CUDA_CHECK(cudaMalloc(&row_flags, std::max<size_t>(static_cast<size_t>(rows), 16)));
    if (a_bytes) fill_fp8_kernel<<<2048, 256>>>(a, rows, c.k, seeds.a, g_normal_codes);
    if (b_bytes) fill_fp8_kernel<<<2048, 256>>>(b, static_cast<long long>(c.g) * c.n, c.k, seeds.b, g_normal_codes);
    if (rows) fill_sfa_kernel<<<1024, 256>>>(sfa, c.kb(), rows, c.sfa_ld(), seeds.sfa);
    if (c.g) fill_sfb_kernel<<<256, 256>>>(sfb, static_cast<long long>(c.g) * c.nb(), c.kb(), seeds.sfb);
    CUDA_CHECK(cudaGetLastError());
    set_sizes(c);
  }
  // Uploads c.sizes and the matching row flags.
  void set_sizes(const Case& c) {
    if (c.g) CUDA_CHECK(cudaMemcpy(sizes, c.sizes.data(), c.g * sizeof(int), cudaMemcpyHostToDevice));
    const RowMap map(c);
    std::vector<uint8_t> flags(static_cast<size_t>(c.rows()));
    for (long long r = 0; r < c.rows(); ++r) flags[r] = map.group_of(r) >= 0 ? 1 : 0;
    if (!flags.empty()) CUDA_CHECK(cudaMemcpy(row_flags, flags.data(), flags.size(), cudaMemcpyHostToDevice));
  }
  void release() {
    cudaFree(a), cudaFree(b), cudaFree(sfa), cudaFree(sfb), cudaFree(sizes), cudaFree(d), cudaFree(d2);
    cudaFree(tile_counter);
    cudaFree(row_flags);
    *this = DeviceData();
  }
};

GroupedGemmProblem make_problem(const Case& c, const DeviceData& dd, void* d, OutDtype out) {
  GroupedGemmProblem p;
  p.a = dd.a, p.b = dd.b, p.sfa = dd.sfa, p.sfa_ld = static_cast<int>(c.sfa_ld()), p.sfb = dd.sfb, p.d = d;
  p.out_dtype = out;
  p.m = c.m, p.n = c.n, p.k = c.k, p.num_groups = c.g;
  p.group_sizes = dd.sizes;
  p.masked = c.masked;
  p.tile_counter = dd.tile_counter;
  return p;
}

// ------------------------------------------------------------------------------------------------
// Device-side whole-output checks
// ------------------------------------------------------------------------------------------------

// counts[0]: non-finite elements in owned rows; counts[1]: elements != 0 (or NaN) in rows that must
// be zero.
__global__ void check_rows_kernel(const void* d, long long rows, int n, int is_bf16, const uint8_t* flags,
                                  unsigned long long* counts) {
  unsigned long long bad_valid = 0, bad_zero = 0;
  const long long count = rows * n;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float v = load_out(d, static_cast<size_t>(i), is_bf16);
    if (flags[i / n]) bad_valid += !isfinite(v);
    else bad_zero += !(v == 0.0f);
  }
  if (bad_valid) atomicAdd(&counts[0], bad_valid);
  if (bad_zero) atomicAdd(&counts[1], bad_zero);
}

// ------------------------------------------------------------------------------------------------
// Host reference (float64)
// ------------------------------------------------------------------------------------------------

// Decoded data of the rows / columns the check needs, computed from the hash.
struct HostRef {
  const Case& c;
  const Seeds& s;
  HostRef(const Case& cs, const Seeds& seeds) : c(cs), s(seeds) {}
  void a_row(long long row, float* out) const {
    const float* lut = fp8_lut();
    for (int k = 0; k < c.k; ++k) out[k] = lut[fp8_code(mix3(s.a, static_cast<uint64_t>(row), k), g_normal_codes)];
  }
  void b_row(int g, int col, float* out) const {
    const uint64_t r = static_cast<uint64_t>(g) * c.n + col;
    const float* lut = fp8_lut();
    for (int k = 0; k < c.k; ++k) out[k] = lut[fp8_code(mix3(s.b, r, k), g_normal_codes)];
  }
  double sfa(long long row, int kb) const { return scale_value(mix3(s.sfa, static_cast<uint64_t>(row), kb)); }
  double sfb(int g, int col, int kb) const {
    return scale_value(mix3(s.sfb, static_cast<uint64_t>(g) * c.nb() + col / 128, kb));
  }
  // sum_kb sfa * sfb * (exact block dot product: e4m3 products are exact in float, the sum in double)
  double dot(const float* arow, const float* brow, const double* sa, int g, int col) const {
    double acc = 0;
    for (int kb = 0; kb < c.kb(); ++kb) {
      double blk = 0;
      const int k1 = std::min(c.k, (kb + 1) * 128);
      for (int k = kb * 128; k < k1; ++k) blk += static_cast<double>(arow[k] * brow[k]);
      acc += blk * sa[kb] * sfb(g, col, kb);
    }
    return acc;
  }
};

// The rows and columns whose values are compared with the reference: all of them for small cases;
// otherwise rows around group starts / ends (incl. the first rows past the clamped sum) and random
// rows, and the edge / scale-block-edge / random columns.
struct Sample {
  std::vector<long long> rows;
  std::vector<int> cols;
  bool full = false;
};

Sample make_sample(const Case& c, const RowMap& map, uint64_t seed) {
  Sample s;
  const long long rows = c.rows();
  s.full = static_cast<double>(rows) * c.n * c.k <= 1.5e9;
  if (s.full) {
    for (long long r = 0; r < rows; ++r) s.rows.push_back(r);
    for (int col = 0; col < c.n; ++col) s.cols.push_back(col);
    return s;
  }
  std::set<long long> rs;
  auto add_row = [&](long long r) {
    if (r >= 0 && r < rows) rs.insert(r);
  };
  Rng rng(seed);
  std::vector<int> groups;
  for (int g = 0; g < c.g && g < 4; ++g) groups.push_back(g);
  for (int i = 0; i < 6 && c.g > 0; ++i) groups.push_back(rng.below(c.g));
  if (c.g > 0) groups.push_back(c.g - 1);
  for (int g : groups) {
    const long long st = map.start[g], en = st + map.rows[g];
    for (long long r : {st - 1, st, st + 1, st + 63, st + 64, st + 127, st + 128, en - 1, en, en + 1}) add_row(r);
  }
  if (!c.masked) add_row(map.total - 1), add_row(map.total), add_row(rows - 1);
  while (static_cast<int>(rs.size()) < 96) add_row(static_cast<long long>(rng.next() % static_cast<uint64_t>(rows)));
  s.rows.assign(rs.begin(), rs.end());
  std::set<int> cs;
  auto add_col = [&](int col) {
    if (col >= 0 && col < c.n) cs.insert(col);
  };
  for (int col : {0, 1, 7, 8, 63, 64, 127, 128, 129, c.n - 129, c.n - 128, c.n - 9, c.n - 8, c.n - 2, c.n - 1}) add_col(col);
  while (static_cast<int>(cs.size()) < std::min(c.n, 80)) add_col(rng.below(c.n));
  s.cols.assign(cs.begin(), cs.end());
  return s;
}

// Reference values of the sample ([rows][cols]; 0 for rows no group owns).
std::vector<double> reference(const Case& c, const Seeds& seeds, const RowMap& map, const Sample& s) {
  const HostRef ref(c, seeds);
  const int nr = static_cast<int>(s.rows.size()), nc = static_cast<int>(s.cols.size());
  std::vector<double> out(static_cast<size_t>(nr) * nc, 0.0);
  // Decode the B rows of every (group used by the sample, column) once.
  std::vector<int> group_of_row(nr);
  std::vector<int> used(c.g, -1);
  int num_used = 0;
  for (int i = 0; i < nr; ++i) {
    group_of_row[i] = map.group_of(s.rows[i]);
    if (group_of_row[i] >= 0 && used[group_of_row[i]] < 0) used[group_of_row[i]] = num_used++;
  }
  std::vector<int> used_list(num_used);
  for (int g = 0; g < c.g; ++g)
    if (used[g] >= 0) used_list[used[g]] = g;
  std::vector<float> bdec(static_cast<size_t>(num_used) * nc * c.k);
  parallel_for(num_used * nc, [&](int idx) {
    const int u = idx / nc, j = idx % nc;
    ref.b_row(used_list[u], s.cols[j], &bdec[static_cast<size_t>(idx) * c.k]);
  });
  parallel_for(nr, [&](int i) {
    const int g = group_of_row[i];
    if (g < 0) return;
    std::vector<float> arow(c.k);
    std::vector<double> sa(c.kb());
    ref.a_row(s.rows[i], arow.data());
    for (int kb = 0; kb < c.kb(); ++kb) sa[kb] = ref.sfa(s.rows[i], kb);
    for (int j = 0; j < nc; ++j)
      out[static_cast<size_t>(i) * nc + j] =
          ref.dot(arow.data(), &bdec[(static_cast<size_t>(used[g]) * nc + j) * c.k], sa.data(), g, s.cols[j]);
  });
  return out;
}

// ------------------------------------------------------------------------------------------------
// Test driver
// ------------------------------------------------------------------------------------------------

// Variant names leave out the multicast: the grouped kernels take multicast 1 only.
constexpr bool kShowMulticast = false;

std::vector<Variant> check_variants(bool bf16_only, bool shallow) {
  std::vector<Variant> v;
  for (const auto& t : fp8gemm::kCompiledGroupedTiles)
    for (OutDtype out : {OutDtype::kBF16, OutDtype::kF32}) {
      if (bf16_only && out != OutDtype::kBF16) continue;
      if (!fp8gemm::is_compiled_grouped(GemmConfig{t.block_m, t.block_n, 0, 0, 1}, out)) continue;  // 256-row f32
      v.push_back({GemmConfig{t.block_m, t.block_n, 0, 0, 1}, out});
      // Shallow ring on few CTAs: every CTA walks many groups, stages wrap at odd places.
      if (shallow) v.push_back({GemmConfig{t.block_m, t.block_n, 3, 5, 1}, out});
    }
  return v;
}

struct Checker {
  const Case& c;
  const Seeds& seeds;
  DeviceData& dd;
  unsigned long long* scratch;  // 2 counters
  RowMap map;
  Sample sample;
  std::vector<double> ref;
  long long* d_rows = nullptr;
  int* d_cols = nullptr;
  float* d_samples = nullptr;

  Checker(const Case& cs, const Seeds& s, DeviceData& d, unsigned long long* sc)
      : c(cs), seeds(s), dd(d), scratch(sc), map(cs) {
    sample = make_sample(c, map, 99);
    ref = reference(c, seeds, map, sample);
    const size_t nr = sample.rows.size(), nc = sample.cols.size();
    CUDA_CHECK(cudaMalloc(&d_rows, std::max<size_t>(nr, 1) * sizeof(long long)));
    CUDA_CHECK(cudaMalloc(&d_cols, std::max<size_t>(nc, 1) * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_samples, std::max<size_t>(nr * nc, 1) * sizeof(float)));
    if (nr) CUDA_CHECK(cudaMemcpy(d_rows, sample.rows.data(), nr * sizeof(long long), cudaMemcpyHostToDevice));
    if (nc) CUDA_CHECK(cudaMemcpy(d_cols, sample.cols.data(), nc * sizeof(int), cudaMemcpyHostToDevice));
  }
  ~Checker() { cudaFree(d_rows), cudaFree(d_cols), cudaFree(d_samples); }

  // Checks the output in `d` (already computed and synchronised). Returns "" if right.
  std::string verify(const void* d, OutDtype out) {
    std::string why;
    const bool bf16 = out == OutDtype::kBF16;
    const long long rows = c.rows();
    if (rows == 0 || c.n == 0) return why;
    CUDA_CHECK(cudaMemset(scratch, 0, 2 * sizeof(unsigned long long)));
    check_rows_kernel<<<1024, 256>>>(d, rows, c.n, bf16 ? 1 : 0, dd.row_flags, scratch);
    CUDA_CHECK(cudaGetLastError());
    unsigned long long counts[2];
    CUDA_CHECK(cudaMemcpy(counts, scratch, sizeof(counts), cudaMemcpyDeviceToHost));
    if (counts[0]) why += "non-finite/unwritten elements in owned rows: " + std::to_string(counts[0]) + "; ";
    if (counts[1]) why += "non-zero elements in rows no group owns: " + std::to_string(counts[1]) + "; ";

    const int nr = static_cast<int>(sample.rows.size()), nc = static_cast<int>(sample.cols.size());
    const int total = nr * nc;
    gather_kernel<<<cdiv(total, 256), 256>>>(d, c.n, bf16 ? 1 : 0, d_rows, d_cols, nr, nc, d_samples);
    CUDA_CHECK(cudaGetLastError());
    std::vector<float> got(total);
    CUDA_CHECK(cudaMemcpy(got.data(), d_samples, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    const double diff = calc_diff(got, ref);
    if (!(diff <= 1e-5)) why += "calc_diff " + std::to_string(diff) + " > 1e-5; ";
    long long bad = 0;
    double worst = 0;
    int wi = 0;
    for (int i = 0; i < nr; ++i) {
      double ss = 0;
      for (int j = 0; j < nc; ++j) ss += ref[static_cast<size_t>(i) * nc + j] * ref[static_cast<size_t>(i) * nc + j];
      const double rms = std::sqrt(ss / std::max(nc, 1));
      for (int j = 0; j < nc; ++j) {
        const size_t idx = static_cast<size_t>(i) * nc + j;
        const double err = std::fabs(got[idx] - ref[idx]);
        const double tol = 1e-2 * (std::fabs(ref[idx]) + rms);
        const bool zero_row = map.group_of(sample.rows[i]) < 0;
        if (zero_row ? !(got[idx] == 0.0f) : !(err <= tol)) {
          ++bad;
          const double rel = err / (tol + 1e-300);
          if (!(rel <= worst)) worst = rel, wi = static_cast<int>(idx);
        }
      }
    }
    if (bad) {
      char buf[200];
      const long long r = sample.rows[wi / nc];
      std::snprintf(buf, sizeof(buf), "%lld elements off (worst at row %lld (group %d), col %d: got %.6g want %.6g)",
                    bad, r, map.group_of(r), sample.cols[wi % nc], got[wi], ref[wi]);
      why += buf;
    }
    return why;
  }
};

void report(const Case& c, const std::string& what, const std::string& why) {
  ++g_checks;
  if (!why.empty()) {
    ++g_failures;
    std::printf("FAIL %-34s %-24s %s\n", c.name.c_str(), what.c_str(), why.c_str());
    std::fflush(stdout);
  }
}

void check_case(const Case& c, const Seeds& seeds, DeviceData& dd, unsigned long long* scratch,
                const std::vector<Variant>& variants) {
  Checker checker(c, seeds, dd, scratch);
  for (const Variant& v : variants) {
    const std::string name = v.name(kShowMulticast);
    const bool bf16 = v.out == OutDtype::kBF16;
    if ((static_cast<long long>(c.n) * (bf16 ? 2 : 4)) % 16 != 0) continue;  // unsupported by contract
    const size_t out_bytes = static_cast<size_t>(c.rows()) * c.n * (bf16 ? 2 : 4);
    std::string why;
    const cudaError_t err = run_twice(
        [&](void* d) { return fp8gemm::launch_fp8_grouped_gemm(make_problem(c, dd, d, v.out), v.cfg, 0); }, dd.d,
        dd.d2, out_bytes);
    if (err != cudaSuccess) {
      std::printf("FAIL %-34s %-24s launch/run error %s\n", c.name.c_str(), name.c_str(), cudaGetErrorName(err));
      if (err != cudaErrorInvalidValue) std::exit(3);  // a kernel fault poisons the context
      ++g_failures, ++g_checks;
      continue;
    }
    why = checker.verify(dd.d, v.out);
    if (out_bytes) {
      const unsigned long long mism = device_count_mismatch(dd.d, dd.d2, out_bytes, scratch);
      if (mism) why += "non-deterministic bytes: " + std::to_string(mism) + "; ";
    }
    report(c, name, why);
  }
  std::printf("checked %-34s G=%-4d %s=%-6d N=%-5d K=%-5d (%s reference, %zu variants), failures so far: %d\n",
              c.name.c_str(), c.g, c.masked ? "Mmax" : "M", c.m, c.n, c.k,
              checker.sample.full ? "full" : "sampled", variants.size(), g_failures);
  std::fflush(stdout);
}

// A CUDA graph captured once must follow the sizes in device memory: capture, then change the
// sizes (outside the graph), replay, verify.
void check_graph(Case c, const Seeds& seeds, DeviceData& dd, unsigned long long* scratch,
                 const std::vector<std::vector<int>>& size_sets) {
  const Variant v{GemmConfig{fp8gemm::kCompiledGroupedTiles[0].block_m, fp8gemm::kCompiledGroupedTiles[0].block_n, 0,
                             0, 1},
                  OutDtype::kBF16};
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const cudaError_t launch_err = fp8gemm::launch_fp8_grouped_gemm(make_problem(c, dd, dd.d, v.out), v.cfg, stream);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  if (launch_err != cudaSuccess) {
    report(c, "graph capture", std::string("launch during capture: ") + cudaGetErrorName(launch_err));
    cudaGraphDestroy(graph), cudaStreamDestroy(stream);
    return;
  }
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (const auto& sizes : size_sets) {
    c.sizes = sizes;
    dd.set_sizes(c);
    CUDA_CHECK(cudaMemset(dd.d, 0xFF, static_cast<size_t>(c.rows()) * c.n * 2));
    CUDA_CHECK(cudaDeviceSynchronize());  // `stream` does not synchronise with the legacy stream
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    Checker checker(c, seeds, dd, scratch);
    report(c, "graph replay", checker.verify(dd.d, v.out));
  }
  std::printf("checked %-34s CUDA graph replays with %zu size sets, failures so far: %d\n", c.name.c_str(),
              size_sets.size(), g_failures);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// Launcher contract: bad problems / configs are rejected with cudaErrorInvalidValue.
void check_rejections(const Case& contiguous, const Case& masked, const DeviceData& dc, const DeviceData& dm) {
  auto launch = [](const GroupedGemmProblem& p, const GemmConfig& cfg) {
    return fp8gemm::launch_fp8_grouped_gemm(p, cfg, 0);
  };
  auto expect_invalid = [&](const GroupedGemmProblem& p, const GemmConfig& cfg, const char* what) {
    expect_rejected(launch(p, cfg), what);
  };
  const GemmConfig good{128, 128, 0, 0, 1};
  const GroupedGemmProblem p = make_problem(contiguous, dc, dc.d, OutDtype::kBF16);
  const GroupedGemmProblem pm = make_problem(masked, dm, dm.d, OutDtype::kBF16);
  expect_shared_rejections(p, good, launch);
  GemmConfig cfg = good;
  cfg.multicast = 2;
  expect_invalid(p, cfg, "multicast 2");
  cfg = good;
  cfg.block_n = 112;
  expect_invalid(p, cfg, "tile not compiled for grouped");
  GroupedGemmProblem q = p;
  q.sfa_ld = (p.m + 3) / 4 * 4 - 4;
  expect_invalid(q, good, "sfa_ld < M");
  q = pm;
  q.sfa_ld = (pm.m + 3) / 4 * 4;  // enough for Mmax, not for G * Mmax
  expect_invalid(q, good, "masked sfa_ld < G * Mmax");
  q = p;
  q.group_sizes = nullptr;
  expect_invalid(q, good, "null group_sizes");
  q = p;
  q.num_groups = -1;
  expect_invalid(q, good, "negative G");
  ++g_checks;
  if (fp8gemm::is_compiled_grouped(GemmConfig{128, 112, 0, 0, 1}, OutDtype::kBF16) ||
      !fp8gemm::is_compiled_grouped(GemmConfig{64, 128, 0, 0, 1}, OutDtype::kF32)) {
    ++g_failures;
    std::printf("FAIL is_compiled_grouped\n");
  }
}

struct BenchRow {
  std::string label, config;
  double us, tflops;
};

// Whether `tiles` ("" = all, else e.g. "256x128,128x128") names the tile.
bool tile_selected(const std::string& tiles, const fp8gemm::CompiledTile& t) {
  return tiles.empty() || (',' + tiles + ',').find(',' + std::to_string(t.block_m) + 'x' + std::to_string(t.block_n) +
                                                  ',') != std::string::npos;
}

void bench_case(const Case& c, DeviceData& dd, int runs, const L2Flush& flush, const std::string& tiles,
                std::vector<BenchRow>& table) {
  const double flops = 2.0 * static_cast<double>(RowMap(c).valid_rows()) * c.n * static_cast<double>(c.k);
  for (const auto& t : fp8gemm::kCompiledGroupedTiles) {
    if (!tile_selected(tiles, t)) continue;
    const Variant v{GemmConfig{t.block_m, t.block_n, 0, 0, 1}, OutDtype::kBF16};
    const GroupedGemmProblem p = make_problem(c, dd, dd.d, v.out);
    if (fp8gemm::launch_fp8_grouped_gemm(p, v.cfg, 0) != cudaSuccess) continue;
    // Timed: the GEMM (it also zeroes the rows no group owns).
    const double sec =
        median_ms([&] { return fp8gemm::launch_fp8_grouped_gemm(p, v.cfg, 0); }, /*warmup=*/2, runs, flush) * 1e-3;
    const std::string name = v.name(kShowMulticast);
    table.push_back({c.name, name, sec * 1e6, flops / sec * 1e-12});
    std::printf("  bench %-34s %-22s %9.1f us %8.1f TFLOP/s\n", c.name.c_str(), name.c_str(), sec * 1e6,
                flops / sec * 1e-12);
    std::fflush(stdout);
#ifdef FP8GEMM_EXPERIMENT_TIMELINE
    CUDA_CHECK(cudaMemset(flush.buf, 1, flush.bytes));
    print_timeline(name.c_str(), [&] { return fp8gemm::launch_fp8_grouped_gemm(p, v.cfg, 0); });
#endif
  }
}

// ------------------------------------------------------------------------------------------------
// Case lists
// ------------------------------------------------------------------------------------------------

Case contiguous(const std::string& name, int m, int n, int k, std::vector<int> sizes) {
  Case c;
  c.name = name, c.masked = false, c.g = static_cast<int>(sizes.size()), c.m = m, c.n = n, c.k = k;
  c.sizes = std::move(sizes);
  return c;
}

Case masked(const std::string& name, int mmax, int n, int k, std::vector<int> masked_m) {
  Case c;
  c.name = name, c.masked = true, c.g = static_cast<int>(masked_m.size()), c.m = mmax, c.n = n, c.k = k;
  c.sizes = std::move(masked_m);
  return c;
}

// Random sizes in [lo, hi], with some zeros.
std::vector<int> random_sizes(Rng& rng, int g, int lo, int hi, double zero_fraction) {
  std::vector<int> s(g);
  for (int& v : s) v = rng.uniform_f64() < zero_fraction ? 0 : lo + rng.below(hi - lo + 1);
  return s;
}

// `g` groups of about `avg` rows: even (all avg) or uneven (+-30%, ~1/8 empty), summing to g*avg
// (the non-empty groups are rescaled proportionally, then the rounding remainder spread by 1s).
std::vector<int> bench_sizes(int g, int avg, bool uneven, uint64_t seed) {
  std::vector<int> s(g, avg);
  if (!uneven || g == 1) return s;
  Rng rng(seed);
  for (int& v : s) v = static_cast<int>(std::lround(avg * (0.7 + 0.6 * rng.uniform_f64())));
  for (int i = 0; i < std::max(1, g / 8); ++i) s[rng.below(g)] = 0;
  const long long target = static_cast<long long>(g) * avg;
  long long sum = 0;
  for (int v : s) sum += v;
  if (sum == 0) return std::vector<int>(g, avg);
  long long rescaled = 0;
  for (int& v : s) rescaled += (v = static_cast<int>(static_cast<double>(v) * target / sum));
  for (int i = 0; rescaled != target; i = (i + 1) % g) {
    if (s[i] == 0) continue;
    const int step = rescaled < target ? 1 : -1;
    s[i] += step, rescaled += step;
  }
  return s;
}

std::vector<Case> small_cases() {
  return {
      // tail rows zero (sum 287 < 300), an empty group, N with a partial 128-tile, K % 128 != 0
      contiguous("contig small tail", 300, 272, 1552, {100, 0, 150, 37}),
      // negative size, sum past M (clamped: {0, 120, 80})
      contiguous("contig small clamp", 200, 128, 256, {-5, 120, 500}),
      contiguous("contig G=1 full", 129, 256, 512, {129}),
      contiguous("contig G=1 short", 129, 256, 512, {64}),
      contiguous("contig G=0", 70, 128, 256, {}),
      // masked_m: 0, == Mmax, > Mmax, partial, negative
      masked("masked small", 100, 272, 1552, {0, 100, 37, 250}),
      masked("masked small neg", 130, 128, 256, {-3, 129}),
  };
}

std::vector<Case> check_cases(uint64_t seed) {
  Rng rng(seed * 31 + 7);
  std::vector<Case> v = small_cases();
  v.push_back(contiguous("contig uneven tail", 1000, 384, 1024, random_sizes(rng, 8, 0, 140, 0.25)));
  {
    std::vector<int> s = random_sizes(rng, 16, 0, 90, 0.2);
    s[3] = -7, s[9] = -100000;
    v.push_back(contiguous("contig neg + past M", 777, 256, 512, s));
  }
  v.push_back(contiguous("contig G=1 past M", 513, 512, 896, {1000}));
  // Tiny and tile-edge groups (1, 63, 64, 65, 127, 128, 129 rows) among random ones.
  {
    std::vector<int> s = random_sizes(rng, 32, 0, 130, 0.15);
    const int edges[] = {1, 63, 64, 65, 127, 128, 129};
    for (int i = 0; i < 7; ++i) s[2 + 3 * i] = edges[i];
    v.push_back(contiguous("contig tile-edge groups", 2048, 256, 640, s));
  }
  v.push_back(contiguous("contig G=64 ~100 rows", 6400, 256, 384, random_sizes(rng, 64, 50, 150, 0.1)));
  v.push_back(contiguous("contig G=256 uneven N=160", 9000, 160, 256, random_sizes(rng, 256, 0, 70, 0.2)));
  v.push_back(masked("masked mixed", 200, 384, 1024, {0, 200, 350, 1, 64, 129}));
  v.push_back(masked("masked Mmax=64", 64, 256, 512, {64, 0, 33, -1}));
  v.push_back(masked("masked G=1 Mmax=1024", 1024, 256, 256, {1000}));
  {
    std::vector<int> s = random_sizes(rng, 24, 0, 80, 0.2);
    s[5] = 1000;
    v.push_back(masked("masked G=24 Mmax=72 N=136", 72, 136, 400, s));
  }
  return v;
}

std::vector<Case> bench_cases(uint64_t seed) {
  std::vector<Case> v;
  struct Shape {
    int g, avg, n, k;
  };
  // SPEC's shapes, and one group of 32768 rows at N7168 K2048: the dense GEMM's work and bytes (one
  // B), against which 4x8192 tells the cost of streaming four B matrices from the kernel's own.
  const Shape shapes[] = {{8, 4096, 4096, 7168}, {4, 8192, 7168, 2048}, {1, 32768, 7168, 2048},
                          {32, 256, 4096, 7168}, {256, 1024, 4096, 7168}};
  for (const Shape& s : shapes)
    for (bool uneven : {false, true}) {
      if (uneven && s.g == 1) continue;
      char name[64];
      std::snprintf(name, sizeof(name), "contig %dx%d N%d K%d %s", s.g, s.avg, s.n, s.k, uneven ? "uneven" : "even");
      Case c = contiguous(name, s.g * s.avg, s.n, s.k, bench_sizes(s.g, s.avg, uneven, seed + s.g));
      c.bench = true, c.bf16_only = true;
      v.push_back(c);
    }
  struct MShape {
    int g, mmax, n, k;
  };
  const MShape mshapes[] = {{1, 1024, 4096, 7168}, {2, 512, 4096, 7168}, {4, 256, 4096, 7168},
                            {1, 1024, 7168, 2048}, {4, 256, 7168, 2048}};
  for (const MShape& s : mshapes) {
    char name[64];
    std::snprintf(name, sizeof(name), "masked %dx%d N%d K%d", s.g, s.mmax, s.n, s.k);
    Case c = masked(name, s.mmax, s.n, s.k, std::vector<int>(s.g, s.mmax));
    c.bench = true, c.bf16_only = true;
    v.push_back(c);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  bool small = false, bench = true, check = true;
  std::string only_case, tiles;
  uint64_t seed = 4321;
  int runs = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--small") small = true, bench = false;
    else if (a == "--no-bench") bench = false;
    else if (a == "--bench-only") check = false;
    else if (a == "--normal") g_normal_codes = true;
    else if (a.rfind("--seed=", 0) == 0) seed = std::strtoull(a.c_str() + 7, nullptr, 10);
    else if (a.rfind("--runs=", 0) == 0) runs = std::max(5, std::atoi(a.c_str() + 7));
    else if (a.rfind("--case=", 0) == 0) only_case = a.substr(7);
    else if (a.rfind("--tiles=", 0) == 0) tiles = a.substr(8);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines in order with compute-sanitizer's reports
  print_device();
  print_tiles("grouped", fp8gemm::kCompiledGroupedTiles);

  unsigned long long* scratch = nullptr;
  CUDA_CHECK(cudaMalloc(&scratch, 2 * sizeof(unsigned long long)));

  if (check) {
    const std::vector<Case> cases = small ? small_cases() : check_cases(seed);
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      if (!only_case.empty() && c.name.find(only_case) == std::string::npos) continue;
      const Seeds seeds(seed + 17 * i);
      DeviceData dd;
      dd.create(c, seeds);
      check_case(c, seeds, dd, scratch, check_variants(c.bf16_only, /*shallow=*/true));
      dd.release();
    }
    // Rejections and CUDA graphs on two small problems.
    if (only_case.empty()) {
      const Case cc = contiguous("contig graph", 600, 256, 384, {100, 0, 250, 90});
      const Case cm = masked("masked graph", 160, 256, 384, {0, 160, 77});
      const Seeds seeds(seed + 999);
      DeviceData dc, dm;
      dc.create(cc, seeds);
      dm.create(cm, seeds);
      check_rejections(cc, cm, dc, dm);
      check_graph(cc, seeds, dc, scratch, {{100, 0, 250, 90}, {0, 601, -4, 3}, {7, 7, 7, 7}});
      check_graph(cm, seeds, dm, scratch, {{0, 160, 77}, {500, -1, 1}});
      dc.release();
      dm.release();
    }
  }

  if (bench) {
    const L2Flush flush(512ull << 20);
    std::vector<BenchRow> table;
    const std::vector<Case> cases = bench_cases(seed);
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      if (!only_case.empty() && c.name.find(only_case) == std::string::npos) continue;
      const Seeds seeds(seed + 1000 + i);
      DeviceData dd;
      dd.create(c, seeds);
      check_case(c, seeds, dd, scratch, check_variants(true, /*shallow=*/false));  // the timed configs
      bench_case(c, dd, runs, flush, tiles, table);
      dd.release();
    }
    std::printf("\n%-36s %-22s %10s %10s\n", "grouped case (bf16 out)", "config", "time(us)", "TFLOP/s");
    for (const BenchRow& r : table)
      std::printf("%-36s %-22s %10.1f %10.1f\n", r.label.c_str(), r.config.c_str(), r.us, r.tflops);
    // Best per case, and uneven / even.
    std::printf("\n%-36s %10s\n", "best per case", "TFLOP/s");
    double even_best = 0;
    for (size_t i = 0; i < table.size();) {
      size_t j = i;
      double best = 0;
      std::string cfg;
      for (; j < table.size() && table[j].label == table[i].label; ++j)
        if (table[j].tflops > best) best = table[j].tflops, cfg = table[j].config;
      const std::string& label = table[i].label;
      const bool is_even = label.find(" even") != std::string::npos;
      const bool is_uneven = label.find("uneven") != std::string::npos;
      if (is_even) even_best = best;
      if (is_uneven && even_best > 0)
        std::printf("%-36s %10.1f  (%s; %.3f of even)\n", label.c_str(), best, cfg.c_str(), best / even_best);
      else
        std::printf("%-36s %10.1f  (%s)\n", label.c_str(), best, cfg.c_str());
      i = j;
    }
  }
  cudaFree(scratch);
  std::printf("%d passed, %d failed\n", g_checks - g_failures, g_failures);
  return g_failures == 0 ? 0 : 1;
}
