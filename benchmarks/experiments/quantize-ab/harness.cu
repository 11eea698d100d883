// The quantize+transpose A/B harness for the row-wise kernels on bf16 input (build.sh builds it,
// with the variants it names in variants.inc): each variant's outputs (poisoned first) against v0's
// bit for bit, then each variant timed in rounds (a copy of x, then every variant, the next round
// in reverse order) of `reps` back-to-back launches between CUDA events; medians. The copy is
// cudaMemcpy device to device. GB/s = (x [+ u] + q + qt + s + st) / time, the benchmark's count.
// SOAK_MS=<ms> (environment) adds settled timing: after a case's rounds, the copy and each variant
// run back to back for SOAK_MS each while a host thread reads the SM clock and the board power
// through NVML every 5 ms; printed: the median time per launch and the mean clock and power over
// the second half of each soak, when the power controller has set its clock.
#include <dlfcn.h>

#include <chrono>

#include "harness_common.cuh"  // CUDA_CHECK, device_count_mismatch (tools/)

// The few NVML calls the soak needs, opened at run time (libnvidia-ml comes with the driver).
struct Nvml {
  using Ret = int;  // nvmlReturn_t, 0 = success
  Ret (*init)() = nullptr;
  Ret (*handle)(unsigned, void**) = nullptr;
  Ret (*clock)(void*, int, unsigned*) = nullptr;  // type 1 = NVML_CLOCK_SM, MHz
  Ret (*power)(void*, unsigned*) = nullptr;       // mW
  void* dev = nullptr;
  bool open() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) return false;
    init = reinterpret_cast<decltype(init)>(dlsym(lib, "nvmlInit_v2"));
    handle = reinterpret_cast<decltype(handle)>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    clock = reinterpret_cast<decltype(clock)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    power = reinterpret_cast<decltype(power)>(dlsym(lib, "nvmlDeviceGetPowerUsage"));
    int cuda_dev = 0;
    return init && handle && clock && power && init() == 0 && cudaGetDevice(&cuda_dev) == cudaSuccess &&
           handle(unsigned(cuda_dev), &dev) == 0;  // (assumes CUDA's and NVML's orders agree)
  }
};

#define VARIANT(n) extern "C" cudaError_t qt_##n(const void*, const void*, int, int64_t, int64_t, int64_t, int64_t, \
                                                 int64_t, void*, float*, void*, float*, cudaStream_t);
#include "variants.inc"
#undef VARIANT
using Fn = decltype(&qt_v0);
struct Var { const char* name; Fn fn; };
#define VARIANT(n) {#n, qt_##n},
static Var vars[] = {
#include "variants.inc"
};
#undef VARIANT
constexpr int kVars = sizeof(vars) / sizeof(vars[0]);

__global__ void fill_bf16(uint16_t* p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    uint32_t h2 = h * 747796405u + 2891336453u; h2 ^= h2 >> 17;
    // roughly normal: sum of two uniforms, times scale; some rows much larger (outlier rows)
    float v = ((h & 0xFFFF) / 65536.0f + (h2 & 0xFFFF) / 65536.0f - 1.0f) * 3.0f * scale;
    if (((i / 4099) % 37) == 5) v *= 50.0f;
    float f = v; uint32_t b; memcpy(&b, &f, 4); p[i] = uint16_t((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
  }
}

struct Bufs { void *q, *qt; float *s, *st; };

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 4, reps = argc > 2 ? atoi(argv[2]) : 20;
  bool small = argc > 3 && std::string(argv[3]) == "small";
  struct Case { const char* name; int act; int64_t batch, rows, cols, rows_out; };
  std::vector<Case> cases = small ? std::vector<Case>{
      {"gelu 3x1100x1544", 1, 3, 1100, 1544, 1100}, {"gelu 1000x2048 align128", 1, 1, 1000, 2048, 1024},
      {"gelu grad 3x1100x1544", 2, 3, 1100, 1544, 1100}, {"gelu 300x136", 1, 1, 300, 136, 304},
      {"plain 260x1000", 0, 1, 260, 1000, 260}}
    : std::vector<Case>{
      {"gelu 8192x14336", 1, 1, 8192, 14336, 8192}, {"gelu 8200x14336 align128", 1, 1, 8200, 14336, 8320},
      {"gelu 4x4096x7168", 1, 4, 4096, 7168, 4096}, {"gelu 2048x14336", 1, 1, 2048, 14336, 2048},
      {"gelu grad 8192x14336", 2, 1, 8192, 14336, 8192}, {"gelu grad 8200x14336 align128", 2, 1, 8200, 14336, 8320},
      {"plain 8192x7168", 0, 1, 8192, 7168, 8192}};
  cudaStream_t st; CUDA_CHECK(cudaStreamCreate(&st));
  cudaEvent_t e0, e1; CUDA_CHECK(cudaEventCreate(&e0)); CUDA_CHECK(cudaEventCreate(&e1));
  for (const Case& c : cases) {
    const int64_t n = c.batch * c.rows * c.cols, rt = (c.rows + 127) / 128, ct = (c.cols + 127) / 128;
    const int64_t qb = n, qtb = c.batch * c.cols * c.rows_out, sb = c.batch * ct * c.rows * 4, stb = c.batch * rt * c.cols * 4;
    uint16_t *x, *u = nullptr, *cp;
    CUDA_CHECK(cudaMalloc(&x, n * 2)); CUDA_CHECK(cudaMalloc(&cp, n * 2));
    fill_bf16<<<1024, 256, 0, st>>>(x, n, 1234u, 1.0f);
    if (c.act == 2) { CUDA_CHECK(cudaMalloc(&u, n * 2)); fill_bf16<<<1024, 256, 0, st>>>(u, n, 777u, 0.7f); }
    Bufs b[kVars];
    unsigned long long* scratch;
    CUDA_CHECK(cudaMalloc(&scratch, sizeof(unsigned long long)));
    auto launch = [&](int v) {
      return vars[v].fn(x, u, c.act, c.batch, c.rows, c.cols, c.rows_out, c.cols, b[v].q, b[v].s, b[v].qt, b[v].st, st);
    };
    bool all_same = true;
    for (int v = 0; v < kVars; ++v) {
      CUDA_CHECK(cudaMalloc(&b[v].q, qb)); CUDA_CHECK(cudaMalloc(&b[v].qt, qtb)); CUDA_CHECK(cudaMalloc(&b[v].s, sb)); CUDA_CHECK(cudaMalloc(&b[v].st, stb));
      CUDA_CHECK(cudaMemsetAsync(b[v].q, 0xFF, qb, st)); CUDA_CHECK(cudaMemsetAsync(b[v].qt, 0xFF, qtb, st));
      CUDA_CHECK(cudaMemsetAsync(b[v].s, 0xFF, sb, st)); CUDA_CHECK(cudaMemsetAsync(b[v].st, 0xFF, stb, st));
      CUDA_CHECK(launch(v));
      CUDA_CHECK(cudaStreamSynchronize(st));
      if (v > 0) {
        void* bufs0[4] = {b[0].q, b[0].qt, b[0].s, b[0].st}; void* bufsv[4] = {b[v].q, b[v].qt, b[v].s, b[v].st};
        int64_t sizes[4] = {qb, qtb, sb, stb}; const char* nm[4] = {"q", "qt", "s", "st"};
        for (int k = 0; k < 4; ++k)
          if (device_count_mismatch(bufs0[k], bufsv[k], sizes[k], scratch)) {
            printf("MISMATCH %s %s %s\n", c.name, vars[v].name, nm[k]); all_same = false;
          }
      } else {  // v0: no poison left in q or qt (0xFF is an e4m3 NaN; the data has none)
        std::vector<uint8_t> h(std::max(qb, qtb));
        int64_t nan = 0;
        for (auto [buf, size] : {std::pair<void*, int64_t>{b[0].q, qb}, {b[0].qt, qtb}}) {
          CUDA_CHECK(cudaMemcpy(h.data(), buf, size, cudaMemcpyDeviceToHost));
          for (int64_t i = 0; i < size; ++i) nan += (h[i] & 0x7F) == 0x7F;
        }
        if (nan) { printf("v0 %s: %lld NaN/poison bytes\n", c.name, (long long)nan); all_same = false; }
      }
    }
    printf("== %s: outputs %s\n", c.name, all_same ? "bitwise equal to v0 (no poison left)" : "DIFFER");
    if (!small) {  // timing
      const double bytes = double(n) * 2 * (c.act == 2 ? 2 : 1) + qb + qtb + sb + stb;
      std::vector<std::vector<float>> t(kVars + 1);
      auto time_one = [&](int v) {  // us per launch of variant v (kVars: the copy)
        CUDA_CHECK(cudaEventRecord(e0, st));
        for (int r = 0; r < reps; ++r) {
          if (v < kVars) CUDA_CHECK(launch(v));
          else CUDA_CHECK(cudaMemcpyAsync(cp, x, n * 2, cudaMemcpyDeviceToDevice, st));
        }
        CUDA_CHECK(cudaEventRecord(e1, st)); CUDA_CHECK(cudaEventSynchronize(e1));
        float ms; CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1)); return ms * 1000.0f / reps;
      };
      for (int v = 0; v <= kVars; ++v) time_one(v);  // warm-up
      for (int r = 0; r < rounds; ++r) {
        t[kVars].push_back(time_one(kVars));
        for (int v = 0; v < kVars; ++v) {
          const int w = r % 2 ? kVars - 1 - v : v;
          t[w].push_back(time_one(w));
        }
      }
      auto med = [](std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
      if (const char* soak = getenv("SOAK_MS")) {
        static Nvml nvml;
        static const bool nvml_ok = nvml.open();
        const double soak_s = atof(soak) / 1000.0;
        using Clock = std::chrono::steady_clock;
        for (int v = kVars; v >= 0; --v) {  // the copy first
          struct Sample { double at; unsigned mhz, mw; };
          std::vector<Sample> samples;
          std::atomic<bool> done{false};
          const auto t0 = Clock::now();
          auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
          std::thread sampler([&] {
            while (!done && nvml_ok) {
              Sample sm{since(), 0, 0};
              if (nvml.clock(nvml.dev, 1, &sm.mhz) == 0 && nvml.power(nvml.dev, &sm.mw) == 0) samples.push_back(sm);
              std::this_thread::sleep_for(std::chrono::milliseconds(5));
            }
          });
          std::vector<float> late;
          while (since() < soak_s) {
            const bool second_half = since() >= soak_s / 2;
            const float us = time_one(v);
            if (second_half) late.push_back(us);
          }
          done = true;
          sampler.join();
          double mhz = 0, w = 0;
          int k = 0;
          for (const Sample& sm : samples)
            if (sm.at >= soak_s / 2) { mhz += sm.mhz; w += sm.mw / 1000.0; ++k; }
          const double us = late.empty() ? 0 : med(late);
          const double gbs = (v < kVars ? bytes : 2.0 * n * 2) / (us * 1e3);
          printf("   soak %-6s %8.2f us  %7.1f GB/s  SM %6.0f MHz  %5.0f W  (%d samples, %zu windows)\n",
                 v < kVars ? vars[v].name : "copy", us, gbs, k ? mhz / k : 0.0, k ? w / k : 0.0, k, late.size());
        }
      }
      const double copy_us = med(t[kVars]), copy_gbs = 2.0 * n * 2 / (copy_us * 1e3);
      printf("   copy of x: %.2f us, %.1f GB/s\n", copy_us, copy_gbs);
      const double base = med(t[0]);
      for (int v = 0; v < kVars; ++v) {
        const double us = med(t[v]);
        printf("   %-4s %8.2f us  %7.1f GB/s  %.3f of copy  (v0 / this %.3f)  [", vars[v].name, us, bytes / (us * 1e3),
               bytes / (us * 1e3) / copy_gbs, base / us);
        for (float s : t[v]) printf(" %.1f", s);
        printf(" ]\n");
      }
    }
    for (int v = 0; v < kVars; ++v) { cudaFree(b[v].q); cudaFree(b[v].qt); cudaFree(b[v].s); cudaFree(b[v].st); }
    cudaFree(x); cudaFree(u); cudaFree(cp); cudaFree(scratch);
  }
  return 0;
}
