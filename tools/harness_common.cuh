// Host helpers shared by the standalone GEMM harnesses (gemm_, grouped_, wgrad_standalone_test.cu):
// error checks, check counting, hashing / random numbers, e4m3 decoding, host threads, device-side
// output checks, calc_diff and timing with L2 flushed. Each harness is one translation unit; the
// helpers are inline so that a harness that does not use one gets no unused-function warning.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cuda_check.h"
#include "gemm/fp8_gemm.h"

namespace {

inline int cdiv(int a, int b) { return (a + b - 1) / b; }

// ------------------------------------------------------------------------------------------------
// Hashing and random numbers
// ------------------------------------------------------------------------------------------------

// The splitmix64 output function: a well-mixed 64-bit hash of z.
__host__ __device__ inline uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct Rng {  // splitmix64
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t next() { return splitmix64_mix(s += 0x9E3779B97F4A7C15ull); }
  float uniform_f32() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
  double uniform_f64() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  float symmetric() { return 2.0f * uniform_f32() - 1.0f; }  // [-1, 1)
  float normal() {  // standard normal (Box-Muller), as torch.randn / jax.random.normal give
    const double u1 = 1.0 - uniform_f64(), u2 = uniform_f64();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
};

// ------------------------------------------------------------------------------------------------
// Host utilities
// ------------------------------------------------------------------------------------------------

// fn(0 .. n-1) on all hardware threads (the float64 references of big shapes are slow otherwise).
inline void parallel_for(int n, const std::function<void(int)>& fn) {
  const int num_threads = std::max(1, std::min<int>(n, static_cast<int>(std::thread::hardware_concurrency())));
  std::atomic<int> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < num_threads; ++t)
    threads.emplace_back([&]() {
      for (int i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
    });
  for (auto& th : threads) th.join();
}

// e4m3 code -> float (exact), built on first use (thread-safe: a function-local static).
inline const float* fp8_lut() {
  static const std::array<float, 256> lut = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) {
      __nv_fp8_e4m3 v;
      v.__x = static_cast<__nv_fp8_storage_t>(i);
      t[i] = static_cast<float>(v);
    }
    return t;
  }();
  return lut.data();
}

// A device copy of `h` (at least 16 bytes, so that empty tensors still get a valid aligned pointer).
template <class T>
inline T* device_copy(const std::vector<T>& h) {
  T* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(h.size() * sizeof(T), 16)));
  if (!h.empty()) CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

inline void print_device() {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s, %d SMs, sm_%d%d\n", prop.name, prop.multiProcessorCount, prop.major, prop.minor);
}

// One line per tile: the deepest pipeline that fits, per output dtype.
template <int N>
void print_tiles(const char* label, const fp8gemm::CompiledTile (&tiles)[N]) {
  for (const auto& t : tiles)
    std::printf("%s tile %3dx%-3d  max_stages bf16 %2d  f32 %2d\n", label, t.block_m, t.block_n,
                fp8gemm::max_stages(t.block_m, t.block_n, fp8gemm::OutDtype::kBF16),
                fp8gemm::max_stages(t.block_m, t.block_n, fp8gemm::OutDtype::kF32));
}

// ------------------------------------------------------------------------------------------------
// Configurations and checks
// ------------------------------------------------------------------------------------------------

// Checks run and failed; the exit code is 0 iff g_failures == 0.
inline int g_checks = 0;
inline int g_failures = 0;

// One launch configuration under test.
struct Variant {
  fp8gemm::GemmConfig cfg;
  fp8gemm::OutDtype out;
  // "128x128 bf16 mc1 st3 sm5" ("64x128 bf16 ks4 ..." with split-K); without the multicast where it is
  // always 1 (grouped GEMMs).
  std::string name(bool show_multicast = true) const {
    char mc[16] = "";
    if (cfg.k_splits > 1)
      std::snprintf(mc, sizeof(mc), "ks%d ", cfg.k_splits);
    else if (show_multicast)
      std::snprintf(mc, sizeof(mc), "mc%d%s ", cfg.multicast, cfg.multicast == 1 ? "" : (cfg.multicast_a ? "A" : "B"));
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%dx%d %s %sst%d sm%d", cfg.block_m, cfg.block_n,
                  out == fp8gemm::OutDtype::kBF16 ? "bf16" : "f32", mc, cfg.num_stages, cfg.num_sms);
    return buf;
  }
};

// Launcher contract: a bad problem or config is rejected with cudaErrorInvalidValue (`err`).
inline void expect_rejected(cudaError_t err, const char* what) {
  ++g_checks;
  if (err != cudaErrorInvalidValue) {
    ++g_failures;
    std::printf("FAIL rejection '%s': got %s\n", what, cudaGetErrorName(err));
  }
}

// The rejections the dense and grouped launchers share. `p` and `good` are accepted;
// launch(problem, config) returns the launcher's error.
template <class Problem, class Launch>
void expect_shared_rejections(const Problem& p, const fp8gemm::GemmConfig& good, const Launch& launch) {
  Problem q = p;
  q.k = 8;
  expect_rejected(launch(q, good), "K % 16 != 0");
  q = p;
  q.n = 4;
  expect_rejected(launch(q, good), "N * 2 % 16 != 0");
  fp8gemm::GemmConfig c = good;
  c.num_stages = 1000;
  expect_rejected(launch(p, c), "too many stages");
  q = p;
  q.a = static_cast<const uint8_t*>(p.a) + 1;
  expect_rejected(launch(q, good), "misaligned A");
}

// Poisons d and d2 with 0xFF bytes (NaN: every element must be written), then runs launch(d) and
// launch(d2), synchronising after each; the two outputs must then be bitwise identical.
template <class Launch>
cudaError_t run_twice(const Launch& launch, void* d, void* d2, size_t out_bytes) {
  if (out_bytes) {
    CUDA_CHECK(cudaMemset(d, 0xFF, out_bytes));
    CUDA_CHECK(cudaMemset(d2, 0xFF, out_bytes));
  }
  cudaError_t err = launch(d);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err == cudaSuccess) err = launch(d2);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  return err;
}

// ------------------------------------------------------------------------------------------------
// Device-side output checks (outputs can be hundreds of MB: count on the GPU, copy back samples)
// ------------------------------------------------------------------------------------------------

__device__ inline float load_out(const void* d, size_t i, int is_bf16) {
  return is_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(d)[i]) : static_cast<const float*>(d)[i];
}

__global__ void count_mismatch_kernel(const uint8_t* x, const uint8_t* y, size_t bytes, unsigned long long* count) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < bytes;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    local += x[i] != y[i];
  if (local) atomicAdd(count, local);
}

// out[i * nc + j] = d[rows[i], cols[j]] of a row-major D with n columns.
template <class RowIndex>
__global__ void gather_kernel(const void* d, int n, int is_bf16, const RowIndex* rows, const int* cols, int nr, int nc,
                              float* out) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= nr * nc) return;
  out[idx] = load_out(d, static_cast<size_t>(rows[idx / nc]) * n + cols[idx % nc], is_bf16);
}

// Bytes that differ between x and y (the determinism check: two runs must be bitwise identical).
inline unsigned long long device_count_mismatch(const void* x, const void* y, size_t bytes,
                                                unsigned long long* scratch) {
  CUDA_CHECK(cudaMemset(scratch, 0, sizeof(unsigned long long)));
  count_mismatch_kernel<<<1024, 256>>>(static_cast<const uint8_t*>(x), static_cast<const uint8_t*>(y), bytes,
                                       scratch);
  CUDA_CHECK(cudaGetLastError());
  unsigned long long h = 0;
  CUDA_CHECK(cudaMemcpy(&h, scratch, sizeof(h), cudaMemcpyDeviceToHost));
  return h;
}

// 1 - 2*sum(x*y) / sum(x*x + y*y): 0 for identical vectors (DeepGEMM's measure).
inline double calc_diff(const std::vector<float>& x, const std::vector<double>& y) {
  double xy = 0, xx_yy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    xy += static_cast<double>(x[i]) * y[i];
    xx_yy += static_cast<double>(x[i]) * x[i] + y[i] * y[i];
  }
  if (xx_yy == 0) return 0;
  return 1.0 - 2.0 * xy / xx_yy;
}

// ------------------------------------------------------------------------------------------------
// Timing
// ------------------------------------------------------------------------------------------------

// A buffer larger than L2 (50 MB): a memset of it before each timed run evicts A / B / D.
struct L2Flush {
  void* buf = nullptr;
  size_t bytes = 0;
  explicit L2Flush(size_t bytes_) : bytes(bytes_) { CUDA_CHECK(cudaMalloc(&buf, bytes)); }
  ~L2Flush() { cudaFree(buf); }
  L2Flush(const L2Flush&) = delete;
  L2Flush& operator=(const L2Flush&) = delete;
};

// Median time in ms of `launch` (returns cudaError_t) over `runs` runs on the legacy stream, each
// after an L2 flush, following `warmup` untimed launches.
//
// The GPU's power controller lets a GEMM draw more than the power limit for its first ~20-40 ms of
// load (H200: ~790 W against 700 W), then steps the SM clock down by 10-17% (RESULTS.md,
// session 41). So the runs of a bench that starts from idle are fast, and whatever runs later in the
// same process (the second variant, say) is slower. Two environment options show and control this:
//   FP8GEMM_BENCH_SETTLE_MS=n  launch back to back for n ms first (1500 settles the clock: every
//                              variant is then timed power-capped; the flushing memsets draw
//                              power too, so compare variants, not these times with a long run's);
//   FP8GEMM_BENCH_TIMES=1      print every run's time (us), in launch order: a step is the clock.
template <class Launch>
double median_ms(const Launch& launch, int warmup, int runs, const L2Flush& flush) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) CUDA_CHECK(launch());
  CUDA_CHECK(cudaDeviceSynchronize());
  if (const char* settle = std::getenv("FP8GEMM_BENCH_SETTLE_MS")) {
    const double settle_ms = std::atof(settle);
    float elapsed = 0;
    CUDA_CHECK(cudaEventRecord(start, 0));
    while (elapsed < settle_ms) {
      for (int i = 0; i < 8; ++i) CUDA_CHECK(launch());
      CUDA_CHECK(cudaEventRecord(stop, 0));
      CUDA_CHECK(cudaEventSynchronize(stop));
      CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
    }
  }
  std::vector<float> times;
  for (int i = 0; i < runs; ++i) {
    CUDA_CHECK(cudaMemsetAsync(flush.buf, i & 0xFF, flush.bytes, 0));
    CUDA_CHECK(cudaEventRecord(start, 0));
    CUDA_CHECK(launch());
    CUDA_CHECK(cudaEventRecord(stop, 0));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (std::getenv("FP8GEMM_BENCH_TIMES") != nullptr) {
    std::printf("  times (us):");
    for (float t : times) std::printf(" %.1f", t * 1e3);
    std::printf("\n");
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace
