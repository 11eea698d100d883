// Peer benchmark: DeepGEMM's own SM90 FP8 GEMM kernel (deep_gemm::sm90_fp8_gemm_1d2d_impl,
// D[M,N] (bf16) = A[M,K] (e4m3) * B[N,K]^T (e4m3) with per-(1x128) A scales and per-(128x128)
// B scales), instantiated and launched by this standalone program (no PyTorch, no JIT) so that it
// can be timed on the same GPU, in the same run, as our kernels. Three of its GEMM types:
//   dense       GemmType::Normal.
//   contiguous  GemmType::MGroupedContiguous (m_grouped_fp8_gemm_nt_contiguous): A [M, K] with its
//               rows sorted by group, every group padded to 128 rows; B [G, N, K]; an int32 group
//               id per row of A, -1 on the padding rows. Even cases come from the table; uneven
//               ones from --sizes-file (each group padded to 128 rows, as DeepGEMM's users must;
//               the FLOPs counted are those of the unpadded rows).
//   masked      GemmType::MGroupedMasked (m_grouped_fp8_gemm_nt_masked): A [G, Mmax, K], D [G, Mmax,
//               N], masked_m [G] = Mmax (every row valid, as our benchmark's masked cases).
//
// Only DeepGEMM's kernel header is used; the host side (tensor maps, launch) is written here after
// DeepGEMM's csrc/jit_kernels/impls/{sm90_fp8_gemm_1d2d,runtime_utils}.hpp and
// csrc/jit_kernels/heuristics/sm90.hpp:
//   template args:  kMajorSFB = K (SFB [G][cdiv(N,128)][cdiv(K,128)] row-major), compiled_dims "nk"
//                   (SHAPE_M = 0, SHAPE_N = N, SHAPE_K = K), kNumGroups = G (1 dense), BLOCK_K = 128,
//                   swizzle A/B = 128 B, swizzle D = largest of {128,64,32,16} dividing BLOCK_N*2,
//                   128 TMA threads, 128 math threads if BLOCK_M <= 64 else 256,
//                   kNumTMAMulticast = cluster_m*cluster_n, kIsTMAMulticastOnA = cluster_n > 1,
//                   kNumSMs = 132, the GemmType, cutlass::bfloat16_t, EpilogueIdentity.
//   tensor maps:    A  uint8 {K, rows}  box {128, BLOCK_M}   swizzle 128B   (rows = M, G*Mmax masked)
//                   B  uint8 {K, G*N}   box {128, BLOCK_N}   swizzle 128B
//                   D  bf16  {N, rows}  box {swizzle_d/2 (BLOCK_N if no swizzle), BLOCK_M}
//                   SFA fp32 {align(M,4), cdiv(K,128) * G'} (MN-major; G' = G masked, else 1)
//                        box {BLOCK_M, 1}, no swizzle
//                   all: L2 promotion 256B, no interleave, OOB fill none.
//   smem size:      DeepGEMM's get_pipeline_config formula (checked at compile time against the
//                   kernel's own smem layout and against the stage count the heuristic derives).
//   launch:         grid = kNumSMs (persistent; the scheduler strides by kNumSMs), block =
//                   128 + math threads, cluster {cluster_m*cluster_n,1,1} when > 1, dynamic smem
//                   attribute set; PDL attribute only with --pdl 1 (DeepGEMM's launcher enables it).
//
// Build: tools/deepgemm_peer.sh build|run. Without PEER_TU everything is one translation unit;
// with -DPEER_TU=i a TU holds only kernel config i, with -DPEER_TU=-1 only the host program (the
// script compiles those in parallel on machines with >= 8 cores and links them). Flags as
// DeepGEMM's JIT: -std=c++20 -O3 --expt-relaxed-constexpr --expt-extended-lambda
// --ptxas-options=--register-usage-level=10, -gencode=arch=compute_90a,code=sm_90a.
//
// Usage: deepgemm_peer [--shapes MxNxK,...] [--grouped cGxRxNxK,mGxRxNxK,...] [--sizes-file F]
//                      [--iters N] [--warmup N] [--settle-ms N] [--flush-iters N] [--flush-mib N] [--pdl 0|1]
//                      [--graph] [--no-check] [--check-tiles T] [--normal] [--seed S] [--list]

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#ifndef PEER_NUM_SMS
#define PEER_NUM_SMS 132
#endif
#ifndef PEER_DG_COMMIT
#define PEER_DG_COMMIT "unknown"
#endif

// What this translation unit builds.
#if !defined(PEER_TU)
#define PEER_BUILD_MAIN 1
#define PEER_BUILD_KERNELS 1
#elif PEER_TU < 0
#define PEER_BUILD_MAIN 1
#define PEER_BUILD_KERNELS 0
#else
#define PEER_BUILD_MAIN 0
#define PEER_BUILD_KERNELS 1
#endif

// The configs DeepGEMM's SM90 heuristic (csrc/jit_kernels/heuristics/sm90.hpp, 132 SMs, bf16 D,
// 1D2D kernel; get_best_config over get_layout_candidates / get_layout_info) picks for these
// shapes. M is a runtime argument of the kernel; N, K and G are compiled.
// X(idx, kind, G, M, N, K, BLOCK_M, BLOCK_N, stages, cluster_m, cluster_n)
//   kind: kDense, kContiguous (M = all rows, G groups of M / G), kMasked (M = Mmax per group);
//   cluster_n = 2: TMA multicast of A (two CTAs on the same M block);
//   cluster_m = 2: TMA multicast of B (two CTAs on the same N block; contiguous: only where both
//                  M blocks belong to the same group, the kernel checks).
// The grouped rows are our benchmark's cases (jax_fp8gemm/bench/suites.py). The heuristic gives
// every contiguous case BLOCK_M = 128 (its layout's row alignment) x 192, B multicast; the masked
// ones 128x128 with A multicast (N4096 K7168) and 128x192 with B multicast (N7168 K2048).
// tools/deepgemm_peer_configs.py transcribes that heuristic and prints these rows (the build checks
// them with --check); tools/deepgemm_peer.sh counts them: keep one X( per line and update
// NUM_CONFIGS there.
#define PEER_CONFIGS(X)                                          \
  X(0, kDense, 1, 4096, 7168, 16384, 256, 128, 3, 1, 2)          \
  X(1, kDense, 1, 8192, 8192, 8192, 256, 128, 3, 1, 2)           \
  X(2, kDense, 1, 4096, 4096, 7168, 256, 128, 3, 1, 2)           \
  X(3, kDense, 1, 4096, 24576, 1536, 256, 128, 3, 1, 2)          \
  X(4, kDense, 1, 4096, 7168, 2048, 256, 128, 3, 1, 2)           \
  X(5, kDense, 1, 4096, 32768, 512, 256, 128, 3, 1, 2)           \
  X(6, kDense, 1, 4096, 2112, 7168, 128, 192, 4, 2, 1)           \
  X(7, kDense, 1, 128, 7168, 16384, 64, 112, 9, 1, 1)            \
  X(8, kDense, 1, 128, 4096, 7168, 64, 64, 13, 1, 1)             \
  X(9, kDense, 1, 64, 2112, 7168, 64, 16, 16, 1, 1)              \
  X(10, kContiguous, 8, 32768, 4096, 7168, 128, 192, 4, 2, 1)    \
  X(11, kContiguous, 4, 32768, 7168, 2048, 128, 192, 4, 2, 1)    \
  X(12, kContiguous, 4, 32768, 4096, 7168, 128, 192, 4, 2, 1)    \
  X(13, kContiguous, 32, 8192, 4096, 7168, 128, 192, 4, 2, 1)    \
  X(14, kContiguous, 256, 262144, 4096, 7168, 128, 192, 4, 2, 1) \
  X(15, kMasked, 1, 1024, 4096, 7168, 128, 128, 5, 1, 2)         \
  X(16, kMasked, 2, 512, 4096, 7168, 128, 128, 5, 1, 2)          \
  X(17, kMasked, 4, 256, 4096, 7168, 128, 128, 5, 1, 2)          \
  X(18, kMasked, 1, 1024, 7168, 2048, 128, 192, 4, 2, 1)         \
  X(19, kMasked, 4, 256, 7168, 2048, 128, 192, 4, 2, 1)

#include "cuda_check.h"

namespace peer {

enum Kind { kDense, kContiguous, kMasked };
inline const char* kind_name(int kind) { return kind == kDense ? "dense" : kind == kContiguous ? "contiguous" : "masked"; }

struct ConfigRow {
  int idx, kind, groups, m, n, k, block_m, block_n, stages, cluster_m, cluster_n;
};
#define PEER_ROW(idx, kind, g, m, n, k, bm, bn, st, cm, cn) ConfigRow{idx, kind, g, m, n, k, bm, bn, st, cm, cn},
constexpr ConfigRow kConfigs[] = {PEER_CONFIGS(PEER_ROW)};
#undef PEER_ROW
constexpr int kNumConfigs = static_cast<int>(sizeof(kConfigs) / sizeof(kConfigs[0]));

constexpr int kBlockK = 128;
constexpr int kSmemCapacity = 232448;  // SM90ArchSpec::smem_capacity
constexpr int kMaxStages = 16;         // get_pipeline_config's kNumMaxStages

constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }
constexpr int align_up(int a, int b) { return cdiv(a, b) * b; }
// DeepGEMM's get_swizzle_mode: largest of 128/64/32/16 dividing the inner block's bytes.
constexpr int swizzle_mode(int inner_bytes) {
  return inner_bytes % 128 == 0 ? 128 : inner_bytes % 64 == 0 ? 64 : inner_bytes % 32 == 0 ? 32 : 16;
}
constexpr int num_math_threads(int block_m) { return block_m <= 64 ? 128 : 256; }

// DeepGEMM's SM90ArchSpec::get_pipeline_config for the 1D2D kernel, bf16 D, e4m3 A/B.
struct Pipeline {
  int smem_size, num_stages;
};
constexpr Pipeline dg_pipeline(int k, int block_m, int block_n) {
  const int smem_cd = align_up(block_m * block_n * 2, 1024);
  const int smem_barriers = kMaxStages * 8 * 2;
  const int smem_a_per_stage = block_m * kBlockK;
  const int smem_b_per_stage = block_n * kBlockK;
  const int smem_sfa_per_stage = align_up(block_m * 4, 128);
  const int use_uniform_sfb = kBlockK % block_n == 0 ? 1 : 2;
  const int smem_extra_sfb = align_up(cdiv(k, kBlockK) * 4 * use_uniform_sfb, 8);
  const int smem_extra = smem_cd + smem_barriers + smem_extra_sfb;
  const int smem_per_stage = smem_a_per_stage + smem_b_per_stage + smem_sfa_per_stage;
  const int by_capacity = (kSmemCapacity - smem_extra) / smem_per_stage;
  const int stages = by_capacity < kMaxStages ? by_capacity : kMaxStages;
  return {smem_extra + stages * smem_per_stage, stages};
}
// The kernel's own dynamic smem layout (sm90_fp8_gemm_1d2d.cuh): D, A/B stages, SFA stages, SFB,
// then 2 * stages 8-byte barriers.
constexpr int kernel_smem_layout(int k, int block_m, int block_n, int stages) {
  const int smem_d = align_up(block_m * block_n * 2, 1024);
  const int uniform = kBlockK % block_n == 0;
  const int smem_sfb = align_up(cdiv(k, kBlockK) * (uniform ? 1 : 2) * 4, 8);
  return smem_d + stages * (block_m * kBlockK + block_n * kBlockK) + stages * align_up(block_m * 4, 128) +
         smem_sfb + 2 * stages * 8;
}

// Compile-time checks of the table: the stage count is the one DeepGEMM's formula derives for this
// K and block shape, and DeepGEMM's smem size covers the kernel's own layout.
constexpr bool check_rows() {
  for (const ConfigRow& c : kConfigs) {
    const Pipeline p = dg_pipeline(c.k, c.block_m, c.block_n);
    if (p.num_stages != c.stages) return false;
    if (kernel_smem_layout(c.k, c.block_m, c.block_n, c.stages) > p.smem_size) return false;
    if (p.smem_size > kSmemCapacity) return false;
    if (c.cluster_m * c.cluster_n > 2 || PEER_NUM_SMS % (c.cluster_m * c.cluster_n) != 0) return false;
    // The heuristic's multicast legality for the masked layout; its contiguous layout's row alignment.
    if (c.kind == kMasked && cdiv(c.n, c.block_n) % (c.cluster_m * c.cluster_n) != 0) return false;
    if (c.kind == kContiguous && (c.block_m != 128 || c.m % c.groups != 0)) return false;
    if (c.kind == kDense && c.groups != 1) return false;
  }
  return true;
}
static_assert(check_rows(), "PEER_CONFIGS: stage count / smem size disagrees with DeepGEMM's get_pipeline_config");

struct Buffers {
  const void* a;       // e4m3 [rows, K] row-major (rows = M; G * M masked)
  const void* b;       // e4m3 [G, N, K] row-major
  const float* sfa;    // fp32 [G'][cdiv(K,128)][align(M,4)] (MN-major; G' = G masked, else 1)
  const float* sfb;    // fp32 [G][cdiv(N,128)][cdiv(K,128)] (K-major)
  void* d;             // bf16 [rows, N] row-major
  int* grouped_layout; // contiguous: group id per row of A (-1: padding); masked: masked_m [G]; dense: null
  int m, n, k;         // M: contiguous all rows, masked rows per group (Mmax)
};

struct Launch {
  // Config
  int block_m = 0, block_n = 0, block_k = 0, stages = 0, cluster_m = 1, cluster_n = 1;
  int tma_threads = 0, math_threads = 0, swizzle_a = 0, swizzle_b = 0, swizzle_d = 0;
  int smem_bytes = 0, smem_kernel_layout = 0, grid = 0, cluster = 1;
  bool pdl = false;
  // From cudaFuncGetAttributes / occupancy
  int num_regs = 0, local_bytes = 0, static_smem = 0, max_threads = 0, max_active_clusters = -1;
  std::function<cudaError_t(cudaStream_t)> fn;
};

using MakeLaunchFn = bool (*)(const Buffers&, bool, Launch*, std::string*);

// Defined (and explicitly instantiated) in the kernel translation units.
template <int kIdx>
bool make_launch(const Buffers& buf, bool pdl, Launch* out, std::string* err);

}  // namespace peer

// =================================================================================================
// Kernel translation units: DeepGEMM's kernel, tensor maps and the launch.
// =================================================================================================
#if PEER_BUILD_KERNELS

#include <deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh>

namespace peer {

// cuTensorMapEncodeTiled through the runtime's driver entry point (no -lcuda).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder(std::string* err) {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = []() -> PFN_cuTensorMapEncodeTiled_v12000 {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  if (!fn) *err = "cuTensorMapEncodeTiled not available from the driver";
  return fn;
}

inline CUtensorMapSwizzle to_tma_swizzle(int mode) {
  switch (mode) {
    case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
    case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    default: return CU_TENSOR_MAP_SWIZZLE_NONE;  // 0 and 16 (DeepGEMM: 16 means no swizzle)
  }
}

// A 2D tensor map as DeepGEMM's make_tma_2d_desc builds it: with a swizzle, the inner box is one
// swizzle atom (swizzle bytes / element size).
inline bool make_2d_map(CUtensorMap* map, CUtensorMapDataType dtype, int elem_size, const void* ptr,
                        uint64_t inner, uint64_t outer, uint64_t outer_stride_elems, uint32_t box_inner,
                        uint32_t box_outer, int swizzle, const char* what, std::string* err) {
  auto encode = tensor_map_encoder(err);
  if (!encode) return false;
  if (swizzle != 0 && swizzle != 16) box_inner = static_cast<uint32_t>(swizzle / elem_size);
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {outer_stride_elems * static_cast<uint64_t>(elem_size)};
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode(map, dtype, 2, const_cast<void*>(ptr), dims, strides, box, elem_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, to_tma_swizzle(swizzle),
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "cuTensorMapEncodeTiled(%s) failed (%d): dims {%" PRIu64 ", %" PRIu64 "} box {%u, %u} swizzle %d",
                  what, static_cast<int>(r), inner, outer, box_inner, box_outer, swizzle);
    *err = buf;
    return false;
  }
  return true;
}

template <int kKind, uint32_t kGroups, uint32_t N, uint32_t K, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kStages,
          uint32_t kClusterM, uint32_t kClusterN>
bool make_launch_impl(const Buffers& buf, bool pdl, Launch* out, std::string* err) {
  constexpr deep_gemm::GemmType kGemmType = kKind == kDense        ? deep_gemm::GemmType::Normal
                                            : kKind == kContiguous ? deep_gemm::GemmType::MGroupedContiguous
                                                                   : deep_gemm::GemmType::MGroupedMasked;
  constexpr uint32_t BLOCK_K = kBlockK;
  constexpr uint32_t kNumTMAThreads = 128;
  constexpr uint32_t kNumMathThreads = num_math_threads(BLOCK_M);
  constexpr uint32_t kSwizzleA = swizzle_mode(BLOCK_K * 1);  // K-major e4m3: 128
  constexpr uint32_t kSwizzleB = swizzle_mode(BLOCK_K * 1);
  constexpr uint32_t kSwizzleD = swizzle_mode(BLOCK_N * 2);  // bf16 D, store_block_n = BLOCK_N
  constexpr uint32_t kNumMulticast = kClusterM * kClusterN;
  constexpr bool kMulticastOnA = kClusterN > 1;
  constexpr uint32_t kNumSMs = PEER_NUM_SMS;
  constexpr Pipeline kPipe = dg_pipeline(K, BLOCK_M, BLOCK_N);
  static_assert(kPipe.num_stages == static_cast<int>(kStages), "stage count differs from DeepGEMM's formula");
  static_assert(kernel_smem_layout(K, BLOCK_M, BLOCK_N, kStages) <= kPipe.smem_size, "smem too small");
  static_assert(kSwizzleA == BLOCK_K && kSwizzleB == BLOCK_K, "DeepGEMM requires no TMA splits for A/B");
  static_assert(kNumSMs % kNumMulticast == 0, "grid must be a multiple of the cluster size");

  auto kernel = &deep_gemm::sm90_fp8_gemm_1d2d_impl<
      cute::UMMA::Major::K,                          // kMajorSFB
      0u, N, K,                                      // SHAPE_M/N/K (compiled_dims "nk")
      kGroups,                                       // kNumGroups
      BLOCK_M, BLOCK_N, BLOCK_K,                     //
      kSwizzleA, kSwizzleB, kSwizzleD,               //
      kStages,                                       //
      kNumTMAThreads, kNumMathThreads,               //
      kNumMulticast, kMulticastOnA,                  //
      kNumSMs, kGemmType,                            //
      cutlass::bfloat16_t,                           // cd_dtype_t
      deep_gemm::epilogue::transform::EpilogueIdentity>;

  if (buf.n != static_cast<int>(N) || buf.k != static_cast<int>(K)) {
    *err = "buffers' N/K differ from the compiled N/K";
    return false;
  }
  const int m = buf.m;
  const int m_aligned = align_up(m, 4);  // get_tma_aligned_size(m, sizeof(float))
  // make_tma_{a,b,cd,sf}_desc: the masked layout stacks its G groups along the rows of A, D and
  // A's scales; every grouped layout stacks the G weights along the rows of B.
  const uint64_t rows = kKind == kMasked ? static_cast<uint64_t>(kGroups) * m : static_cast<uint64_t>(m);
  const uint64_t sfa_outer = static_cast<uint64_t>(cdiv(K, BLOCK_K)) * (kKind == kMasked ? kGroups : 1);
  if ((kKind == kDense) != (buf.grouped_layout == nullptr)) {
    *err = "grouped_layout: needed by the grouped layouts only";
    return false;
  }

  CUtensorMap map_a, map_b, map_d, map_sfa;
  if (!make_2d_map(&map_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, buf.a, K, rows, K, BLOCK_K, BLOCK_M, kSwizzleA, "A", err))
    return false;
  if (!make_2d_map(&map_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, buf.b, K, static_cast<uint64_t>(kGroups) * N, K, BLOCK_K,
                   BLOCK_N, kSwizzleB, "B", err))
    return false;
  if (!make_2d_map(&map_d, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, buf.d, N, rows, N, BLOCK_N, BLOCK_M, kSwizzleD, "D",
                   err))
    return false;
  if (!make_2d_map(&map_sfa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, buf.sfa, m_aligned, sfa_outer, m_aligned, BLOCK_M, 1,
                   0, "SFA", err))
    return false;

  const int smem = kPipe.smem_size;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) {
    *err = std::string("cudaFuncSetAttribute(MaxDynamicSharedMemorySize): ") + cudaGetErrorString(e);
    return false;
  }
  cudaFuncAttributes attr{};
  e = cudaFuncGetAttributes(&attr, kernel);
  if (e != cudaSuccess) {
    *err = std::string("cudaFuncGetAttributes: ") + cudaGetErrorString(e);
    return false;
  }

  Launch& L = *out;
  L.block_m = BLOCK_M, L.block_n = BLOCK_N, L.block_k = BLOCK_K, L.stages = kStages;
  L.cluster_m = kClusterM, L.cluster_n = kClusterN;
  L.tma_threads = kNumTMAThreads, L.math_threads = kNumMathThreads;
  L.swizzle_a = kSwizzleA, L.swizzle_b = kSwizzleB, L.swizzle_d = kSwizzleD;
  L.smem_bytes = smem, L.smem_kernel_layout = kernel_smem_layout(K, BLOCK_M, BLOCK_N, kStages);
  L.grid = static_cast<int>(kNumSMs / kNumMulticast * kNumMulticast);
  L.cluster = kNumMulticast, L.pdl = pdl;
  L.num_regs = attr.numRegs, L.local_bytes = static_cast<int>(attr.localSizeBytes);
  L.static_smem = static_cast<int>(attr.sharedSizeBytes), L.max_threads = attr.maxThreadsPerBlock;

  const int grid = L.grid, cluster = L.cluster;
  auto make_config = [=](cudaStream_t stream, cudaLaunchConfig_t* cfg, cudaLaunchAttribute* attrs) {
    *cfg = cudaLaunchConfig_t{};
    cfg->gridDim = dim3(grid, 1, 1);
    cfg->blockDim = dim3(kNumTMAThreads + kNumMathThreads, 1, 1);
    cfg->dynamicSmemBytes = smem;
    cfg->stream = stream;
    int n = 0;
    if (cluster > 1) {
      attrs[n].id = cudaLaunchAttributeClusterDimension;
      attrs[n].val.clusterDim.x = cluster;
      attrs[n].val.clusterDim.y = 1;
      attrs[n].val.clusterDim.z = 1;
      ++n;
    }
    if (pdl) {
      attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attrs[n].val.programmaticStreamSerializationAllowed = 1;
      ++n;
    }
    cfg->attrs = attrs;
    cfg->numAttrs = n;
  };

  {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attrs[2];
    make_config(nullptr, &cfg, attrs);
    int clusters = -1;
    if (cluster > 1) {
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) clusters = -1;
    } else {
      int per_sm = 0, dev = 0, sms = 0;
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kNumTMAThreads + kNumMathThreads, smem) ==
              cudaSuccess &&
          cudaGetDevice(&dev) == cudaSuccess &&
          cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess)
        clusters = per_sm * sms;
    }
    (void)cudaGetLastError();
    L.max_active_clusters = clusters;
  }

  float* sfb = const_cast<float*>(buf.sfb);
  int* grouped_layout = buf.grouped_layout;
  const uint32_t shape_m = static_cast<uint32_t>(m);
  L.fn = [=](cudaStream_t stream) -> cudaError_t {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attrs[2];
    make_config(stream, &cfg, attrs);
    return cudaLaunchKernelEx(&cfg, kernel, sfb, grouped_layout, shape_m, N, K, map_a, map_b, map_d, map_sfa);
  };
  return true;
}

template <int kIdx>
bool make_launch(const Buffers& buf, bool pdl, Launch* out, std::string* err) {
  constexpr ConfigRow c = kConfigs[kIdx];
  return make_launch_impl<c.kind, c.groups, c.n, c.k, c.block_m, c.block_n, c.stages, c.cluster_m, c.cluster_n>(
      buf, pdl, out, err);
}

#if defined(PEER_TU)
template bool make_launch<PEER_TU>(const Buffers&, bool, Launch*, std::string*);
#endif

}  // namespace peer

#endif  // PEER_BUILD_KERNELS

// =================================================================================================
// Host program: data, reference, checks, timing.
// =================================================================================================
#if PEER_BUILD_MAIN

namespace peer {

#define PEER_FN(idx, ...) &make_launch<idx>,
const MakeLaunchFn kMakeLaunch[] = {PEER_CONFIGS(PEER_FN)};
#undef PEER_FN
static_assert(sizeof(kMakeLaunch) / sizeof(kMakeLaunch[0]) == kNumConfigs, "table size");

// ---- random data (a hash of the element index, generated on the device) ----

__host__ __device__ inline uint64_t mix64(uint64_t z) {  // splitmix64 output function
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__device__ inline float uniform01(uint64_t seed, uint64_t i) {  // [0, 1)
  return static_cast<float>(mix64(seed * 0x9E3779B97F4A7C15ull + i) >> 40) * (1.0f / 16777216.0f);
}

// e4m3 from uniform [-448, 448), or (normal) from N(0, 160^2): what normal values quantized with
// their 1x128 or 128x128 block's amax / 448 look like, as the JAX benchmark feeds them (the tensor
// cores' power, and so the clock under the power limit, depend on the values). Saturated to finite.
__global__ void fill_fp8_kernel(uint8_t* p, size_t n, uint64_t seed, bool normal) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float v = (2.0f * uniform01(seed, i) - 1.0f) * 448.0f;
    if (normal) {  // Box-Muller
      const float u1 = 1.0f - uniform01(seed, i), u2 = uniform01(seed ^ 0x5851F42D4C957F2Dull, i);
      v = 160.0f * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    }
    p[i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
  }
}

// Positive scales: 2^u / 448 with u uniform in [-3, 3).
__global__ void fill_scale_kernel(float* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = exp2f(6.0f * uniform01(seed, i) - 3.0f) * (1.0f / 448.0f);
}

__device__ inline float fp8_to_float(uint8_t x) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(x), __NV_E4M3)));
}

// ---- reference: D[m,n] = sum_kb SFA[kb][m] * SFB[g][n/128][kb] * sum_{k in kb} A[m,k] B[g][n,k] ----
// (g: the group of row m.) Computed for a sample of D's 64-row tiles (RefRows): block (x, y) makes
// 64x64 outputs of tile tile_rows[y], written compactly to ref[y * 64 + r][n]. 256 threads (4x4
// each). Products of e4m3 values summed in fp32 within a 128-wide K block, the scaled block sums
// accumulated in fp64.
constexpr int kRefTile = 64, kRefChunk = 32;
struct RefRows {
  const int* tile_rows;  // the checked 64-row tiles of D
  const int* row_group;  // group of every row of D (a padding row: its group's); null: all group 0
  const int* row_valid;  // nonzero: an output row (contiguous: not a padding row); null: every row
  int rows;              // rows of D (G * Mmax masked)
  int group_rows;        // masked: rows per group (A's scales are stored per group); 0 otherwise
};
__global__ void __launch_bounds__(256) reference_kernel(const uint8_t* __restrict__ A, const uint8_t* __restrict__ B,
                                                        const float* __restrict__ sfa, const float* __restrict__ sfb,
                                                        float* __restrict__ ref, RefRows rr, int N, int K,
                                                        int m_aligned) {
  __shared__ float As[kRefChunk][kRefTile + 1];
  __shared__ float Bs[kRefChunk][kRefTile + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int m0 = rr.tile_rows[blockIdx.y] * kRefTile, n0 = blockIdx.x * kRefTile;
  const int num_kb = (K + kBlockK - 1) / kBlockK, num_nb = (N + kBlockK - 1) / kBlockK;
  // Groups are padded to 128 rows (contiguous) or hold a multiple of 64 rows (masked; the host
  // checks): the tile's rows share one group.
  const int g = rr.row_group ? rr.row_group[m0] : 0;
  const uint8_t* Bg = B + static_cast<size_t>(g) * N * K;
  const float* sfb_g = sfb + static_cast<size_t>(g) * num_nb * num_kb;
  double acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0;

  for (int kb = 0; kb < num_kb; ++kb) {
    float part[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) part[i][j] = 0.0f;
    for (int kc = 0; kc < kBlockK; kc += kRefChunk) {
      for (int e = threadIdx.x; e < kRefTile * kRefChunk; e += blockDim.x) {
        const int r = e / kRefChunk, c = e % kRefChunk;
        const int gk = kb * kBlockK + kc + c;
        const int gm = m0 + r, gn = n0 + r;
        As[c][r] = (gm < rr.rows && gk < K) ? fp8_to_float(A[static_cast<size_t>(gm) * K + gk]) : 0.0f;
        Bs[c][r] = (gn < N && gk < K) ? fp8_to_float(Bg[static_cast<size_t>(gn) * K + gk]) : 0.0f;
      }
      __syncthreads();
#pragma unroll 8
      for (int c = 0; c < kRefChunk; ++c) {
        float a[4], b[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = As[c][ty + 16 * i];
#pragma unroll
        for (int j = 0; j < 4; ++j) b[j] = Bs[c][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) part[i][j] = fmaf(a[i], b[j], part[i][j]);
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int m = m0 + ty + 16 * i;
      if (m >= rr.rows) continue;
      // A's scales: [kb][m_aligned], per group in the masked layout.
      const size_t sfa_idx = rr.group_rows > 0 ? (static_cast<size_t>(m / rr.group_rows) * num_kb + kb) * m_aligned +
                                                     m % rr.group_rows
                                               : static_cast<size_t>(kb) * m_aligned + m;
      const double sa = sfa[sfa_idx];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n = n0 + tx + 16 * j;
        if (n >= N) continue;
        const double sb = sfb_g[static_cast<size_t>(n / kBlockK) * num_kb + kb];
        acc[i][j] += sa * sb * static_cast<double>(part[i][j]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = ty + 16 * i, n = n0 + tx + 16 * j;
      if (m0 + r < rr.rows && n < N)
        ref[(static_cast<size_t>(blockIdx.y) * kRefTile + r) * N + n] = static_cast<float>(acc[i][j]);
    }
}

// ---- comparison ----
struct Stats {
  double sxy, sden, syy;             // sum x*y, sum x*x + y*y, sum y*y (x = D, y = reference)
  float max_abs_err, max_rel_err, max_abs_ref;
  unsigned long long nonfinite, compared;
};

__device__ inline void atomic_max_nonneg(float* addr, float v) {  // v >= 0: int order = float order
  atomicMax(reinterpret_cast<int*>(addr), __float_as_int(v));
}

// Compares the checked rows of D (the reference's compact rows: ref[t * 64 + r][n] is D's row
// tile_rows[t] * 64 + r) with the reference; rows past D and padding rows are skipped.
// rel_floor: the elementwise relative error is |x-y| / max(|y|, rel_floor).
__global__ void __launch_bounds__(256) compare_kernel(const __nv_bfloat16* __restrict__ d, const float* __restrict__ ref,
                                                      RefRows rr, int num_tiles, int N, float rel_floor, Stats* out) {
  double sxy = 0, sden = 0, syy = 0;
  float max_abs_err = 0, max_rel_err = 0, max_abs_ref = 0;
  unsigned long long nonfinite = 0, compared = 0;
  const size_t n_ref = static_cast<size_t>(num_tiles) * kRefTile * N;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n_ref;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t ref_row = i / N;
    const int m = rr.tile_rows[ref_row / kRefTile] * kRefTile + static_cast<int>(ref_row % kRefTile);
    if (m >= rr.rows || (rr.row_valid && !rr.row_valid[m])) continue;
    const float xf = __bfloat162float(d[static_cast<size_t>(m) * N + i % N]);
    const float yf = ref[i];
    ++compared;
    if (!isfinite(xf)) {
      ++nonfinite;
      continue;
    }
    const double x = xf, y = yf;
    sxy += x * y;
    sden += x * x + y * y;
    syy += y * y;
    const float err = fabsf(xf - yf);
    max_abs_err = fmaxf(max_abs_err, err);
    max_rel_err = fmaxf(max_rel_err, err / fmaxf(fabsf(yf), rel_floor));
    max_abs_ref = fmaxf(max_abs_ref, fabsf(yf));
  }
  for (int off = 16; off > 0; off /= 2) {
    sxy += __shfl_xor_sync(0xffffffffu, sxy, off);
    sden += __shfl_xor_sync(0xffffffffu, sden, off);
    syy += __shfl_xor_sync(0xffffffffu, syy, off);
    max_abs_err = fmaxf(max_abs_err, __shfl_xor_sync(0xffffffffu, max_abs_err, off));
    max_rel_err = fmaxf(max_rel_err, __shfl_xor_sync(0xffffffffu, max_rel_err, off));
    max_abs_ref = fmaxf(max_abs_ref, __shfl_xor_sync(0xffffffffu, max_abs_ref, off));
    nonfinite += __shfl_xor_sync(0xffffffffu, nonfinite, off);
    compared += __shfl_xor_sync(0xffffffffu, compared, off);
  }
  if (threadIdx.x % 32 == 0) {
    atomicAdd(&out->sxy, sxy);
    atomicAdd(&out->sden, sden);
    atomicAdd(&out->syy, syy);
    atomic_max_nonneg(&out->max_abs_err, max_abs_err);
    atomic_max_nonneg(&out->max_rel_err, max_rel_err);
    atomic_max_nonneg(&out->max_abs_ref, max_abs_ref);
    atomicAdd(&out->nonfinite, nonfinite);
    atomicAdd(&out->compared, compared);
  }
}

struct CheckResult {
  bool ok;
  double calc_diff, max_rel_err;
};

// Compares D with the reference over the checked outputs: calc_diff = 1 - 2 sum(xy) / sum(x^2 + y^2)
// in fp64 (DeepGEMM's calc_diff), the largest absolute error and the largest relative error
// |x - y| / max(|y|, 1% of rms(y)) (a first pass gets rms(y)). Fails on any non-finite output (D is
// poisoned with NaN before the checked launch) or calc_diff > 1e-5.
CheckResult check_output(const __nv_bfloat16* D, const float* ref, const RefRows& rr, int num_tiles, int N,
                         Stats* stats_dev, cudaStream_t stream, const char* when) {
  Stats st{};
  float floor = 1e30f;
  for (int pass = 0; pass < 2; ++pass) {
    CUDA_CHECK(cudaMemsetAsync(stats_dev, 0, sizeof(Stats), stream));
    compare_kernel<<<1024, 256, 0, stream>>>(D, ref, rr, num_tiles, N, floor, stats_dev);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpyAsync(&st, stats_dev, sizeof(Stats), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (pass == 0) {
      floor = static_cast<float>(0.01 * std::sqrt(st.syy / static_cast<double>(std::max(st.compared, 1ull))));
      if (!(floor > 0)) floor = 1e-30f;
    }
  }
  const double calc_diff = st.sden > 0 ? 1.0 - 2.0 * st.sxy / st.sden : (st.sxy == 0 ? 0.0 : 1.0);
  const bool ok = st.compared > 0 && st.nonfinite == 0 && std::isfinite(calc_diff) && calc_diff <= 1e-5;
  std::printf("   check%s: %llu outputs, calc_diff=%.3e max_abs_err=%.4g (max|ref|=%.4g) max_rel_err=%.3e "
              "(floor: 1%% of rms(ref)=%.3g) nonfinite=%llu  %s\n",
              when, st.compared, calc_diff, st.max_abs_err, st.max_abs_ref, st.max_rel_err, floor, st.nonfinite,
              ok ? "OK" : "FAIL  <<<<<<<<<<<<<<<<");
  return {ok, calc_diff, static_cast<double>(st.max_rel_err)};
}

// ---- host ----

// One timed case: a table row, with its runtime M (and the group sizes of a contiguous case).
struct Case {
  int row = 0;             // index into kConfigs
  int m = 0;               // dense: M; contiguous: all rows of A (every group padded to 128); masked: Mmax
  std::vector<int> sizes;  // contiguous: each group's rows, unpadded
  std::string name;
  double flops = 0;        // 2 * (valid rows) * N * K
};

Case dense_case(const ConfigRow& c, int m) {
  Case cs;
  cs.row = c.idx, cs.m = m;
  cs.name = std::to_string(m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k);
  cs.flops = 2.0 * m * c.n * static_cast<double>(c.k);
  return cs;
}

// A contiguous case with these group sizes (even: the table's M / G rows each).
Case contiguous_case(const ConfigRow& c, std::vector<int> sizes, bool uneven) {
  Case cs;
  cs.row = c.idx;
  long long valid = 0, padded = 0;
  for (int s : sizes) valid += s, padded += align_up(s, 128);
  cs.m = static_cast<int>(padded);
  cs.sizes = std::move(sizes);
  cs.name = "c " + std::to_string(c.groups) + "x" + (uneven ? "~" : "") + std::to_string(c.m / c.groups) + " N" +
            std::to_string(c.n) + " K" + std::to_string(c.k) + (uneven ? " uneven" : "");
  cs.flops = 2.0 * static_cast<double>(valid) * c.n * c.k;
  return cs;
}

Case masked_case(const ConfigRow& c) {
  Case cs;
  cs.row = c.idx, cs.m = c.m;
  cs.name = "m " + std::to_string(c.groups) + "x" + std::to_string(c.m) + " N" + std::to_string(c.n) + " K" +
            std::to_string(c.k);
  cs.flops = 2.0 * c.groups * c.m * c.n * static_cast<double>(c.k);
  return cs;
}

Case table_case(const ConfigRow& c) {
  if (c.kind == kContiguous) return contiguous_case(c, std::vector<int>(c.groups, c.m / c.groups), false);
  return c.kind == kMasked ? masked_case(c) : dense_case(c, c.m);
}

struct Options {
  std::vector<Case> cases;
  int warmup = 20, iters = 50, flush_iters = 30, flush_mib = 2048;
  int check_tiles = 64;  // 64-row tiles of D checked against the reference, spread over D
  int settle_ms = 0;     // back-to-back launches for this long before the timed batch
  bool pdl = false, check = true, graph = false, normal = false;
  uint64_t seed = 1;
};

[[noreturn]] void usage(int rc) {
  std::fprintf(rc ? stderr : stdout,
               "usage: deepgemm_peer [--shapes MxNxK,...] [--grouped cGxRxNxK,mGxRxNxK,...] [--sizes-file F]\n"
               "                     [--iters N] [--warmup N] [--settle-ms N] [--flush-iters N] [--flush-mib N]\n"
               "                     [--pdl 0|1]"
               " [--graph] [--no-check] [--check-tiles T] [--normal] [--seed S] [--list]\n"
               "  --shapes     dense shapes of the table (default, with neither --shapes nor --grouped: every\n"
               "               row); an M not in the table is accepted for an instantiated (N,K) with that\n"
               "               row's config (with a warning)\n"
               "  --grouped    grouped rows of the table: c = contiguous, m = masked; G groups of R rows\n"
               "  --sizes-file uneven contiguous cases, one per line: G N K size_0 ... size_{G-1} (a contiguous\n"
               "               row with that G, N, K must exist); each group is padded to 128 rows\n"
               "  --iters      back-to-back timed launches (default 50; 20 warmup, --warmup)\n"
               "  --settle-ms  before those, launch back to back for this long: the power controller's clock\n"
               "               of a long run (a burst from idle runs above the power limit for ~20-40 ms)\n"
               "  --flush-iters launches timed one by one after a memset of --flush-mib MiB (default 30, 2048)\n"
               "  --check-tiles 64-row tiles of D checked against the fp64 reference (default 64, spread over D)\n"
               "  --normal     A and B values as normal values quantized per block (default: uniform)\n"
               "  --pdl 1      launch with programmatic stream serialization (as DeepGEMM's launcher does)\n"
               "  --graph      also time the back-to-back batch replayed from a CUDA graph\n");
  std::exit(rc);
}

void list_configs() {
  std::printf("instantiated configs (kNumSMs=%d):\n", PEER_NUM_SMS);
  for (const ConfigRow& c : kConfigs)
    std::printf("  %-10s G=%3d %6dx%5dx%5d  BLOCK_M=%3d BLOCK_N=%3d stages=%2d cluster_m=%d cluster_n=%d smem=%d\n",
                kind_name(c.kind), c.groups, c.m, c.n, c.k, c.block_m, c.block_n, c.stages, c.cluster_m, c.cluster_n,
                dg_pipeline(c.k, c.block_m, c.block_n).smem_size);
}

int parse_int(const char* s, const char* what) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (!s[0] || *end || v < 0 || v > (1L << 30)) {
    std::fprintf(stderr, "bad %s: '%s'\n", what, s);
    usage(2);
  }
  return static_cast<int>(v);
}

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    if (comma > pos) out.push_back(list.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

void add_dense_shape(Options& o, const std::string& tok) {
  int m = 0, n = 0, k = 0;
  char tail = 0;
  if (std::sscanf(tok.c_str(), "%dx%dx%d%c", &m, &n, &k, &tail) != 3 || m <= 0 || n <= 0 || k <= 0) {
    std::fprintf(stderr, "bad shape '%s' (want MxNxK)\n", tok.c_str());
    usage(2);
  }
  const ConfigRow* row = nullptr;
  for (const ConfigRow& c : kConfigs)
    if (c.kind == kDense && c.m == m && c.n == n && c.k == k) row = &c;
  if (!row)
    for (const ConfigRow& c : kConfigs)
      if (c.kind == kDense && c.n == n && c.k == k) {
        row = &c;
        std::fprintf(stderr,
                     "warning: %dx%dx%d is not in the table; using the %dx%dx%d instantiation (its config may "
                     "not be what DeepGEMM picks for M=%d)\n",
                     m, n, k, c.m, c.n, c.k, m);
        break;
      }
  if (!row) {
    std::fprintf(stderr, "no dense instantiation for N=%d K=%d (shape '%s'); instantiated:\n", n, k, tok.c_str());
    list_configs();
    std::exit(2);
  }
  o.cases.push_back(dense_case(*row, m));
}

void add_grouped(Options& o, const std::string& tok) {
  int g = 0, r = 0, n = 0, k = 0;
  char kind = 0, tail = 0;
  if (std::sscanf(tok.c_str(), "%c%dx%dx%dx%d%c", &kind, &g, &r, &n, &k, &tail) != 5 || (kind != 'c' && kind != 'm')) {
    std::fprintf(stderr, "bad grouped case '%s' (want cGxRxNxK or mGxRxNxK)\n", tok.c_str());
    usage(2);
  }
  for (const ConfigRow& c : kConfigs) {
    const bool contiguous = kind == 'c' && c.kind == kContiguous && c.m == g * r;
    const bool masked = kind == 'm' && c.kind == kMasked && c.m == r;
    if ((contiguous || masked) && c.groups == g && c.n == n && c.k == k) {
      o.cases.push_back(table_case(c));
      return;
    }
  }
  std::fprintf(stderr, "no grouped row for '%s'; instantiated:\n", tok.c_str());
  list_configs();
  std::exit(2);
}

void add_sizes_file(Options& o, const char* path) {
  FILE* f = std::fopen(path, "r");
  if (!f) {
    std::fprintf(stderr, "cannot open --sizes-file '%s'\n", path);
    std::exit(2);
  }
  char line[1 << 16];
  while (std::fgets(line, sizeof(line), f)) {
    std::vector<long> v;
    char* p = line;
    while (true) {
      char* end = nullptr;
      const long x = std::strtol(p, &end, 10);
      if (end == p) break;
      v.push_back(x);
      p = end;
    }
    if (v.empty() || line[0] == '#') continue;
    const ConfigRow* row = nullptr;
    if (v.size() >= 3)
      for (const ConfigRow& c : kConfigs)
        if (c.kind == kContiguous && c.groups == v[0] && c.n == v[1] && c.k == v[2]) row = &c;
    if (!row || static_cast<long>(v.size()) != 3 + v[0]) {
      std::fprintf(stderr, "--sizes-file: bad line (want G N K and G sizes of a contiguous row): %s", line);
      std::exit(2);
    }
    std::vector<int> sizes;
    for (size_t i = 3; i < v.size(); ++i) {
      if (v[i] < 0) {
        std::fprintf(stderr, "--sizes-file: negative size in: %s", line);
        std::exit(2);
      }
      sizes.push_back(static_cast<int>(v[i]));
    }
    o.cases.push_back(contiguous_case(*row, std::move(sizes), true));
  }
  std::fclose(f);
}

Options parse(int argc, char** argv) {
  Options o;
  std::string shapes, grouped, sizes_file;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        usage(2);
      }
      return argv[++i];
    };
    if (a == "--shapes") shapes = next();
    else if (a == "--grouped") grouped = next();
    else if (a == "--sizes-file") sizes_file = next();
    else if (a == "--iters") o.iters = parse_int(next(), "--iters");
    else if (a == "--warmup") o.warmup = parse_int(next(), "--warmup");
    else if (a == "--flush-iters") o.flush_iters = parse_int(next(), "--flush-iters");
    else if (a == "--flush-mib") o.flush_mib = parse_int(next(), "--flush-mib");
    else if (a == "--check-tiles") o.check_tiles = parse_int(next(), "--check-tiles");
    else if (a == "--settle-ms") o.settle_ms = parse_int(next(), "--settle-ms");
    else if (a == "--pdl") o.pdl = parse_int(next(), "--pdl") != 0;
    else if (a == "--seed") o.seed = static_cast<uint64_t>(parse_int(next(), "--seed"));
    else if (a == "--no-check") o.check = false;
    else if (a == "--normal") o.normal = true;
    else if (a == "--graph") o.graph = true;
    else if (a == "--list") { list_configs(); std::exit(0); }
    else if (a == "-h" || a == "--help") usage(0);
    else {
      std::fprintf(stderr, "unknown argument '%s'\n", a.c_str());
      usage(2);
    }
  }
  if (o.iters < 1) o.iters = 1;
  if (o.check_tiles < 1) o.check_tiles = 1;
  if (shapes.empty() && grouped.empty()) {
    for (const ConfigRow& c : kConfigs) o.cases.push_back(table_case(c));
  } else {
    for (const std::string& tok : split_commas(shapes)) add_dense_shape(o, tok);
    for (const std::string& tok : split_commas(grouped)) add_grouped(o, tok);
  }
  if (!sizes_file.empty()) add_sizes_file(o, sizes_file.c_str());
  return o;
}

// Event-timed single launches, each after a memset of `flush_bytes` (DeepGEMM's bench_kineto
// protocol, timed by events instead of the profiler): us per launch.
__global__ void empty_kernel() {}
std::vector<double> flushed_times(const std::function<cudaError_t(cudaStream_t)>& launch, void* flush,
                                  size_t flush_bytes, int iters, cudaStream_t stream) {
  std::vector<cudaEvent_t> es(2 * iters);
  for (auto& ev : es) CUDA_CHECK(cudaEventCreate(&ev));
  for (int i = 0; i < iters; ++i) {
    CUDA_CHECK(cudaMemsetAsync(flush, i & 0xFF, flush_bytes, stream));
    CUDA_CHECK(cudaEventRecord(es[2 * i], stream));
    CUDA_CHECK(launch(stream));
    CUDA_CHECK(cudaEventRecord(es[2 * i + 1], stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ts(iters);
  for (int i = 0; i < iters; ++i) {
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, es[2 * i], es[2 * i + 1]));
    ts[i] = 1e3 * t;
  }
  for (auto& ev : es) CUDA_CHECK(cudaEventDestroy(ev));
  return ts;
}

struct Result {
  std::string shape, config;
  bool ok = true, checked = false, ran = false;
  double calc_diff = NAN, max_rel = NAN;
  double b2b_us = NAN, graph_us = NAN, flush_us = NAN, flush_min_us = NAN, flush_median_us = NAN;
  double flops = 0;
};

int run(const Options& opt) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  int rt = 0, drv = 0;
  CUDA_CHECK(cudaRuntimeGetVersion(&rt));
  CUDA_CHECK(cudaDriverGetVersion(&drv));
  std::printf("device: %s (sm_%d%d, %d SMs, %.1f GiB), runtime %d, driver %d\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.totalGlobalMem / double(1ull << 30), rt, drv);
  std::printf("DeepGEMM %s sm90_fp8_gemm_1d2d_impl, kNumSMs=%d, compiled_dims=nk, pdl=%d\n", PEER_DG_COMMIT,
              PEER_NUM_SMS, opt.pdl ? 1 : 0);
  if (prop.major != 9) {
    std::fprintf(stderr, "error: needs an sm_90 GPU\n");
    return 2;
  }
  if (prop.multiProcessorCount != PEER_NUM_SMS)
    std::fprintf(stderr,
                 "WARNING: the device has %d SMs but the kernels are compiled for kNumSMs=%d (grid %d): timings "
                 "are not DeepGEMM's (rebuild with -DPEER_NUM_SMS=%d)\n",
                 prop.multiProcessorCount, PEER_NUM_SMS, PEER_NUM_SMS, prop.multiProcessorCount);

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t ev0, ev1;
  CUDA_CHECK(cudaEventCreate(&ev0));
  CUDA_CHECK(cudaEventCreate(&ev1));

  void* flush = nullptr;
  const size_t flush_bytes = static_cast<size_t>(opt.flush_mib) << 20;
  if (opt.flush_iters > 0 && flush_bytes > 0) CUDA_CHECK(cudaMalloc(&flush, flush_bytes));
  Stats* stats_dev = nullptr;
  CUDA_CHECK(cudaMalloc(&stats_dev, sizeof(Stats)));
  // What the event timing adds to a flushed launch: an empty kernel timed the same way (the
  // profiler's kernel time, which DeepGEMM's bench_kineto and our JAX benchmark report, has no such
  // term; it matters for the ~10-60 us decode and masked launches).
  double empty_us = 0;
  if (flush && opt.flush_iters > 0) {
    auto empty = [](cudaStream_t st) {
      empty_kernel<<<1, 32, 0, st>>>();
      return cudaGetLastError();
    };
    for (double t : flushed_times(empty, flush, flush_bytes, opt.flush_iters, stream)) empty_us += t;
    empty_us /= opt.flush_iters;
    std::printf("flushed launch overhead (an empty kernel, event-timed after the memset): %.2f us\n", empty_us);
  }

  std::vector<Result> results;
  bool all_ok = true;
  for (size_t s = 0; s < opt.cases.size(); ++s) {
    const Case& cs = opt.cases[s];
    const ConfigRow& c = kConfigs[cs.row];
    const int G = c.groups, M = cs.m, N = c.n, K = c.k;
    const int rows = c.kind == kMasked ? G * M : M;  // rows of A and D
    const int num_kb = cdiv(K, kBlockK), m_aligned = align_up(M, 4);
    Result R;
    char buf[512];
    R.shape = cs.name;
    R.flops = cs.flops;
    std::printf("\n== %s (%s, G=%d, %d rows of A)\n", R.shape.c_str(), kind_name(c.kind), G, rows);
    if (c.kind == kMasked && M % kRefTile != 0) {  // the reference takes a 64-row tile's group as uniform
      std::printf("   FAIL: masked cases need Mmax %% %d == 0\n", kRefTile);
      all_ok = false;
      continue;
    }

    // The grouped layouts' index arrays: the kernel's (contiguous: group id per row, -1 on the
    // padding rows; masked: masked_m = Mmax) and the reference's (each row's group, valid rows).
    std::vector<int> layout, row_group, row_valid;
    if (c.kind == kContiguous) {
      std::printf("   groups:");
      for (int g = 0; g < G; ++g) {
        const int padded = align_up(cs.sizes[g], 128);
        for (int r = 0; r < padded; ++r) {
          layout.push_back(r < cs.sizes[g] ? g : -1);
          row_group.push_back(g);
          row_valid.push_back(r < cs.sizes[g] ? 1 : 0);
        }
        if (G <= 64) std::printf(" %d", cs.sizes[g]);
      }
      std::printf("%s (each padded to 128 rows: %d rows)\n", G <= 64 ? "" : " (not listed)", rows);
    } else if (c.kind == kMasked) {
      layout.assign(G, M);
      for (int r = 0; r < rows; ++r) row_group.push_back(r / M);
    }
    auto to_device = [&](const std::vector<int>& v) -> int* {
      if (v.empty()) return nullptr;
      int* p = nullptr;
      CUDA_CHECK(cudaMalloc(&p, v.size() * sizeof(int)));
      CUDA_CHECK(cudaMemcpyAsync(p, v.data(), v.size() * sizeof(int), cudaMemcpyHostToDevice, stream));
      return p;
    };
    int* layout_dev = to_device(layout);
    int* row_group_dev = to_device(row_group);
    int* row_valid_dev = to_device(row_valid);
    // The checked 64-row tiles of D, spread over it.
    const int num_row_tiles = cdiv(rows, kRefTile), check_tiles = std::min(num_row_tiles, opt.check_tiles);
    std::vector<int> tile_rows(check_tiles);
    for (int t = 0; t < check_tiles; ++t)
      tile_rows[t] = static_cast<int>(static_cast<long long>(t) * num_row_tiles / check_tiles);
    int* tile_rows_dev = to_device(tile_rows);
    const RefRows rr{tile_rows_dev, row_group_dev, row_valid_dev, rows, c.kind == kMasked ? M : 0};

    // Data
    uint8_t *A = nullptr, *B = nullptr;
    float *sfa = nullptr, *sfb = nullptr, *ref = nullptr;
    __nv_bfloat16* D = nullptr;
    const size_t n_a = static_cast<size_t>(rows) * K, n_b = static_cast<size_t>(G) * N * K;
    const size_t n_sfa = static_cast<size_t>(num_kb) * m_aligned * (c.kind == kMasked ? G : 1);
    const size_t n_sfb = static_cast<size_t>(G) * cdiv(N, 128) * num_kb;
    const size_t n_d = static_cast<size_t>(rows) * N;
    CUDA_CHECK(cudaMalloc(&A, n_a));
    CUDA_CHECK(cudaMalloc(&B, n_b));
    CUDA_CHECK(cudaMalloc(&sfa, n_sfa * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&sfb, n_sfb * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&D, n_d * sizeof(__nv_bfloat16)));
    const uint64_t seed = opt.seed * 1000003ull + static_cast<uint64_t>(s) * 16;
    fill_fp8_kernel<<<1024, 256, 0, stream>>>(A, n_a, seed + 1, opt.normal);
    fill_fp8_kernel<<<1024, 256, 0, stream>>>(B, n_b, seed + 2, opt.normal);
    fill_scale_kernel<<<256, 256, 0, stream>>>(sfa, n_sfa, seed + 3);
    fill_scale_kernel<<<256, 256, 0, stream>>>(sfb, n_sfb, seed + 4);
    CUDA_CHECK(cudaGetLastError());

    Launch L;
    std::string err;
    const Buffers bufs{A, B, sfa, sfb, D, layout_dev, M, N, K};
    if (!kMakeLaunch[c.idx](bufs, opt.pdl, &L, &err)) {
      std::printf("   FAIL: setting up the launch: %s\n", err.c_str());
      R.ok = false;
      all_ok = false;
    } else {
      std::snprintf(buf, sizeof(buf), "%dx%dx%d s%d c%dx%d%s", L.block_m, L.block_n, L.block_k, L.stages, L.cluster_m,
                    L.cluster_n, L.cluster > 1 ? (L.cluster_n > 1 ? " mcA" : " mcB") : "");
      R.config = buf;
      std::printf("   config: BLOCK_M=%d BLOCK_N=%d BLOCK_K=%d stages=%d cluster_m=%d cluster_n=%d (%s) "
                  "threads=%d+%d swizzle A/B/D=%d/%d/%d\n",
                  L.block_m, L.block_n, L.block_k, L.stages, L.cluster_m, L.cluster_n,
                  L.cluster == 1 ? "no multicast" : (L.cluster_n > 1 ? "TMA multicast on A" : "TMA multicast on B"),
                  L.tma_threads, L.math_threads, L.swizzle_a, L.swizzle_b, L.swizzle_d);
      std::printf("   launch: grid=%d cluster=%d block=%d dyn_smem=%d (kernel layout %d) static_smem=%d regs=%d "
                  "local=%d max_active_clusters=%d\n",
                  L.grid, L.cluster, L.tma_threads + L.math_threads, L.smem_bytes, L.smem_kernel_layout, L.static_smem,
                  L.num_regs, L.local_bytes, L.max_active_clusters);
      if (L.max_active_clusters >= 0 && L.max_active_clusters * L.cluster < L.grid)
        std::printf("   WARNING: only %d clusters of %d can be resident: the persistent grid is not co-resident\n",
                    L.max_active_clusters, L.grid / L.cluster);
    }

    // Correctness: poison D, run once, compare the checked tiles against the reference.
    if (R.ok && opt.check) {
      CUDA_CHECK(cudaMemsetAsync(D, 0xFF, n_d * sizeof(__nv_bfloat16), stream));  // bf16 0xFFFF = NaN
      cudaError_t e = L.fn(stream);
      if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
      if (e != cudaSuccess) {
        std::printf("   FAIL: launch: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
        std::fflush(stdout);
        std::exit(3);  // a kernel fault leaves the context unusable
      }
      R.ran = true;
      CUDA_CHECK(cudaMalloc(&ref, static_cast<size_t>(check_tiles) * kRefTile * N * sizeof(float)));
      const dim3 rgrid(cdiv(N, kRefTile), check_tiles);
      cudaEventRecord(ev0, stream);
      reference_kernel<<<rgrid, 256, 0, stream>>>(A, B, sfa, sfb, ref, rr, N, K, m_aligned);
      cudaEventRecord(ev1, stream);
      CUDA_CHECK(cudaGetLastError());
      CUDA_CHECK(cudaStreamSynchronize(stream));
      float ref_ms = 0;
      cudaEventElapsedTime(&ref_ms, ev0, ev1);

      std::printf("   reference: %.1f ms (%d of %d 64-row tiles)\n", ref_ms, check_tiles, num_row_tiles);
      const CheckResult r = check_output(D, ref, rr, check_tiles, N, stats_dev, stream, "");
      R.checked = true;
      R.ok = r.ok;
      R.calc_diff = r.calc_diff;
      R.max_rel = r.max_rel_err;
      if (!R.ok) all_ok = false;
    }

    // Timing
    if (R.ok) {
      cudaError_t e = cudaSuccess;
      for (int i = 0; i < opt.warmup && e == cudaSuccess; ++i) e = L.fn(stream);
      CUDA_CHECK(e);
      if (opt.settle_ms > 0) {  // batches of 8 launches until settle_ms have passed
        const auto t0 = std::chrono::steady_clock::now();
        while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(opt.settle_ms)) {
          for (int i = 0; i < 8 && e == cudaSuccess; ++i) e = L.fn(stream);
          CUDA_CHECK(e);
          CUDA_CHECK(cudaStreamSynchronize(stream));
        }
      }
      CUDA_CHECK(cudaEventRecord(ev0, stream));
      for (int i = 0; i < opt.iters && e == cudaSuccess; ++i) e = L.fn(stream);
      CUDA_CHECK(e);
      CUDA_CHECK(cudaEventRecord(ev1, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, ev0, ev1));
      R.b2b_us = 1e3 * ms / opt.iters;
      R.ran = true;
      std::printf("   back-to-back (%d warmup, %d ms settling, %d launches): %9.2f us  %7.1f TFLOP/s\n", opt.warmup,
                  opt.settle_ms, opt.iters, R.b2b_us, R.flops / (R.b2b_us * 1e-6) / 1e12);

      if (flush && opt.flush_iters > 0) {
        std::vector<double> ts = flushed_times(L.fn, flush, flush_bytes, opt.flush_iters, stream);
        double sum = 0;
        for (double t : ts) sum += t;
        std::sort(ts.begin(), ts.end());
        R.flush_us = sum / opt.flush_iters;
        R.flush_min_us = ts.front();
        R.flush_median_us = ts[ts.size() / 2];
        auto tf = [&](double us) { return R.flops / (us * 1e-6) / 1e12; };
        std::printf("   flushed (%d MiB memset before each, %d launches): mean %9.2f us  %7.1f TFLOP/s  "
                    "(median %.2f us %.1f TFLOP/s, min %.2f us %.1f TFLOP/s; less the empty kernel's %.2f us: "
                    "%.1f TFLOP/s)\n",
                    opt.flush_mib, opt.flush_iters, R.flush_us, tf(R.flush_us), R.flush_median_us,
                    tf(R.flush_median_us), R.flush_min_us, tf(R.flush_min_us), empty_us, tf(R.flush_us - empty_us));
      }

      // Optional: the back-to-back batch replayed from a CUDA graph (no host launch cost between
      // kernels; matters for the smallest shapes only).
      if (opt.graph) {
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        cudaError_t ge = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
        for (int i = 0; i < opt.iters && ge == cudaSuccess; ++i) ge = L.fn(stream);
        cudaError_t ce = cudaStreamEndCapture(stream, &graph);
        if (ge == cudaSuccess) ge = ce;
        if (ge == cudaSuccess) ge = cudaGraphInstantiate(&exec, graph, 0);
        if (ge == cudaSuccess) ge = cudaGraphLaunch(exec, stream);  // warm-up replay
        if (ge == cudaSuccess) ge = cudaEventRecord(ev0, stream);
        if (ge == cudaSuccess) ge = cudaGraphLaunch(exec, stream);
        if (ge == cudaSuccess) ge = cudaEventRecord(ev1, stream);
        if (ge == cudaSuccess) ge = cudaStreamSynchronize(stream);
        float gms = 0;
        if (ge == cudaSuccess) ge = cudaEventElapsedTime(&gms, ev0, ev1);
        if (ge == cudaSuccess) {
          R.graph_us = 1e3 * gms / opt.iters;
          std::printf("   back-to-back from a CUDA graph (%d launches):  %9.2f us  %7.1f TFLOP/s\n", opt.iters,
                      R.graph_us, R.flops / (R.graph_us * 1e-6) / 1e12);
        } else {
          std::printf("   CUDA graph timing unavailable: %s\n", cudaGetErrorString(ge));
          (void)cudaGetLastError();
        }
        if (exec) cudaGraphExecDestroy(exec);
        if (graph) cudaGraphDestroy(graph);
      }

      // D after all the timed launches must still be right.
      if (opt.check && ref) {
        const CheckResult r = check_output(D, ref, rr, check_tiles, N, stats_dev, stream, " after timing");
        if (!r.ok) R.ok = false, all_ok = false;
      }
    }
    std::fflush(stdout);

    CUDA_CHECK(cudaFree(A));
    CUDA_CHECK(cudaFree(B));
    CUDA_CHECK(cudaFree(sfa));
    CUDA_CHECK(cudaFree(sfb));
    CUDA_CHECK(cudaFree(D));
    if (ref) CUDA_CHECK(cudaFree(ref));
    for (int* p : {layout_dev, row_group_dev, row_valid_dev, tile_rows_dev})
      if (p) CUDA_CHECK(cudaFree(p));
    results.push_back(R);
  }

  std::printf("\n== summary (DeepGEMM sm90_fp8_gemm_1d2d, %s, pdl=%d)\n", prop.name, opt.pdl ? 1 : 0);
  std::printf("%-32s %-22s %10s %10s %8s %10s %8s %10s %8s %8s  %s\n", "shape", "config", "calc_diff", "b2b_us",
              "b2b_TF", "flush_us", "flush_TF", "fl_med_us", "fl_med_TF", "fl_net_TF", "status");
  for (const Result& R : results) {
    auto tf = [&](double us) { return std::isfinite(us) ? R.flops / (us * 1e-6) / 1e12 : NAN; };
    std::printf("%-32s %-22s %10.2e %10.2f %8.1f %10.2f %8.1f %10.2f %8.1f %8.1f  %s\n", R.shape.c_str(),
                R.config.c_str(), R.calc_diff, R.b2b_us, tf(R.b2b_us), R.flush_us, tf(R.flush_us), R.flush_median_us,
                tf(R.flush_median_us), tf(R.flush_us - empty_us), !R.ok ? "FAIL" : (R.checked ? "ok" : "unchecked"));
  }
  std::printf("(b2b: mean over the back-to-back batch; flush: mean / median of single launches after a %d MiB memset;"
              " fl_net: the mean less an empty kernel's %.2f us; TF = 2*(valid rows)*N*K / time in TFLOP/s)\n",
              opt.flush_mib, empty_us);
  if (flush) CUDA_CHECK(cudaFree(flush));
  CUDA_CHECK(cudaFree(stats_dev));
  CUDA_CHECK(cudaStreamDestroy(stream));
  if (!all_ok) {
    std::printf("\nDEEPGEMM PEER: FAILED (see FAIL lines above)\n");
    return 1;
  }
  std::printf("\nDEEPGEMM PEER: all checks passed\n");
  return 0;
}

}  // namespace peer

int main(int argc, char** argv) {
  const peer::Options opt = peer::parse(argc, argv);
  return peer::run(opt);
}

#endif  // PEER_BUILD_MAIN
