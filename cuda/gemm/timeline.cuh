// Harness-only diagnostic: a per-tile timeline of the GEMM kernel (where a tile's time goes).
//
// Compiled in only with -DFP8GEMM_EXPERIMENT_TIMELINE (never in the package; tools/timeline.sh
// builds the dense harness with it). The launcher then passes a device buffer in
// GemmKernelArgs::timeline (fp8gemm::experiment_timeline_buffer(), allocated once), and the kernel
// writes SM clock stamps into it:
//   per CTA, kHeader values: global timer (ns) at entry and after the last store, SM clock at both;
//   then per role (math warpgroup 0, 1, the TMA producer) and tile (the first kMaxTiles of the CTA)
//   kEvents stamps, written by one thread of the role (see the FP8GEMM_TIMELINE_MARK calls in
//   fp8_gemm_kernel.cuh for what each event is).
// Without the flag the macros expand to nothing: the kernels' code is unchanged.
#pragma once

#include <cstdint>

namespace fp8gemm {
namespace timeline {

constexpr int kMaxTiles = 64;
constexpr int kEvents = 9;
constexpr int kRoles = 3;  // math warpgroup 0, math warpgroup 1, producer
constexpr int kProducerRole = 2;
constexpr int kHeader = 4;  // global timer at entry / end, SM clock at entry / end
constexpr int kPerCta = kHeader + kRoles * kMaxTiles * kEvents;
constexpr int kMaxCtas = 264;

__device__ __forceinline__ uint64_t sm_clock() {
  uint64_t c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)::"memory");
  return c;
}
__device__ __forceinline__ uint64_t global_timer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}
__device__ __forceinline__ void mark(unsigned long long* buf, int role, int tile, int event) {
  if (buf != nullptr && tile < kMaxTiles && blockIdx.x < kMaxCtas)
    buf[blockIdx.x * kPerCta + kHeader + (role * kMaxTiles + tile) * kEvents + event] = sm_clock();
}
__device__ __forceinline__ void header(unsigned long long* buf, int slot_timer, int slot_clock) {
  if (buf != nullptr && blockIdx.x < kMaxCtas) {
    buf[blockIdx.x * kPerCta + slot_timer] = global_timer();
    buf[blockIdx.x * kPerCta + slot_clock] = sm_clock();
  }
}

}  // namespace timeline
}  // namespace fp8gemm

#ifdef FP8GEMM_EXPERIMENT_TIMELINE
#define FP8GEMM_TIMELINE_MARK(cond, role, tile, event) \
  do {                                                  \
    if (cond) ::fp8gemm::timeline::mark(args.timeline, role, tile, event); \
  } while (0)
#define FP8GEMM_TIMELINE_HEADER(cond, slot_timer, slot_clock) \
  do {                                                         \
    if (cond) ::fp8gemm::timeline::header(args.timeline, slot_timer, slot_clock); \
  } while (0)
#else
#define FP8GEMM_TIMELINE_MARK(cond, role, tile, event) \
  do {                                                  \
  } while (0)
#define FP8GEMM_TIMELINE_HEADER(cond, slot_timer, slot_clock) \
  do {                                                         \
  } while (0)
#endif
