// Host launcher of the sm90 block-scaled FP8 GEMM. The kernels themselves are instantiated in
// fp8_gemm_inst_*.cu (one translation unit per tile shape, so they compile in parallel).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "common/tma_desc.h"
#include "gemm/fp8_gemm.h"
#include "gemm/fp8_gemm_grouped.cuh"
#include "gemm/fp8_gemm_kernel.cuh"
#include "gemm/fp8_gemm_wgrad.cuh"
#include "gemm/zero_rows.h"

// Defined (explicitly instantiated) in fp8_gemm_inst_*.cu.
FP8GEMM_COMPILED_TILES(FP8GEMM_EXTERN_TILE)
FP8GEMM_COMPILED_GROUPED_TILES(FP8GEMM_EXTERN_GROUPED_TILE)
FP8GEMM_COMPILED_WGRAD_TILES(FP8GEMM_EXTERN_WGRAD_TILE)

namespace fp8gemm {
namespace {

using detail::KernelEntry;

// The two lists of compiled tiles (public constexpr array, internal X-macro) must agree.
constexpr bool tile_is_listed(int bm, int bn) {
  for (const CompiledTile& t : kCompiledTiles)
    if (t.block_m == bm && t.block_n == bn) return true;
  return false;
}
#define FP8GEMM_CHECK_TILE(BM, BN) static_assert(tile_is_listed(BM, BN), "tile missing from kCompiledTiles");
FP8GEMM_COMPILED_TILES(FP8GEMM_CHECK_TILE)
#undef FP8GEMM_CHECK_TILE
#define FP8GEMM_COUNT_TILE(BM, BN) +1
static_assert(0 FP8GEMM_COMPILED_TILES(FP8GEMM_COUNT_TILE) == kNumCompiledTiles, "tile lists differ");
#undef FP8GEMM_COUNT_TILE

constexpr bool grouped_tile_is_listed(int bm, int bn) {
  for (const CompiledTile& t : kCompiledGroupedTiles)
    if (t.block_m == bm && t.block_n == bn) return true;
  return false;
}
#define FP8GEMM_CHECK_TILE(BM, BN) \
  static_assert(grouped_tile_is_listed(BM, BN), "tile missing from kCompiledGroupedTiles");
FP8GEMM_COMPILED_GROUPED_TILES(FP8GEMM_CHECK_TILE)
#undef FP8GEMM_CHECK_TILE
#define FP8GEMM_COUNT_TILE(BM, BN) +1
static_assert(0 FP8GEMM_COMPILED_GROUPED_TILES(FP8GEMM_COUNT_TILE) == kNumCompiledGroupedTiles,
              "grouped tile lists differ");
#undef FP8GEMM_COUNT_TILE

constexpr bool wgrad_tile_is_listed(int bm, int bn) {
  for (const CompiledTile& t : kCompiledWgradTiles)
    if (t.block_m == bm && t.block_n == bn) return true;
  return false;
}
#define FP8GEMM_CHECK_TILE(BM, BN) static_assert(wgrad_tile_is_listed(BM, BN), "tile missing from kCompiledWgradTiles");
FP8GEMM_COMPILED_WGRAD_TILES(FP8GEMM_CHECK_TILE)
#undef FP8GEMM_CHECK_TILE
#define FP8GEMM_COUNT_TILE(BM, BN) +1
static_assert(0 FP8GEMM_COMPILED_WGRAD_TILES(FP8GEMM_COUNT_TILE) == kNumCompiledWgradTiles, "wgrad tile lists differ");
#undef FP8GEMM_COUNT_TILE

constexpr int kSmemPerBlockSm90 = 232448;  // 227 KB: per-block opt-in maximum of sm_90
constexpr int kMaxStagesCap = 32;          // deeper pipelines buy nothing
constexpr int kMaxDevices = 64;
constexpr int kNumEntries = 2 * kNumCompiledTiles;

const KernelEntry* registry() {
#define FP8GEMM_ENTRY(BM, BN) \
  detail::kernel_entry<BM, BN, OutDtype::kBF16>(), detail::kernel_entry<BM, BN, OutDtype::kF32>(),
  static const KernelEntry table[kNumEntries] = {FP8GEMM_COMPILED_TILES(FP8GEMM_ENTRY)};
#undef FP8GEMM_ENTRY
  return table;
}

// Index of the (block_m, block_n, out) kernel in a registry table, or -1 if not compiled.
int find_in(const KernelEntry* table, int count, int block_m, int block_n, OutDtype out) {
  for (int i = 0; i < count; ++i)
    if (table[i].block_m == block_m && table[i].block_n == block_n && table[i].out == out) return i;
  return -1;
}

int find_entry(int block_m, int block_n, OutDtype out) {
  return find_in(registry(), kNumEntries, block_m, block_n, out);
}

constexpr int kNumGroupedEntries = 2 * kNumCompiledGroupedTiles;

const KernelEntry* grouped_registry() {
#define FP8GEMM_ENTRY(BM, BN) \
  detail::grouped_kernel_entry<BM, BN, OutDtype::kBF16>(), detail::grouped_kernel_entry<BM, BN, OutDtype::kF32>(),
  static const KernelEntry table[kNumGroupedEntries] = {FP8GEMM_COMPILED_GROUPED_TILES(FP8GEMM_ENTRY)};
#undef FP8GEMM_ENTRY
  return table;
}

int find_grouped_entry(int block_m, int block_n, OutDtype out) {
  return find_in(grouped_registry(), kNumGroupedEntries, block_m, block_n, out);
}

// Wgrad kernels: entry 2*i = dense, 2*i+1 = k-grouped, for tile i of FP8GEMM_COMPILED_WGRAD_TILES.
constexpr int kNumWgradEntries = 2 * kNumCompiledWgradTiles;

const KernelEntry* wgrad_registry() {
#define FP8GEMM_ENTRY(BM, BN) detail::wgrad_kernel_entry<BM, BN>(), detail::kgrouped_wgrad_kernel_entry<BM, BN>(),
  static const KernelEntry table[kNumWgradEntries] = {FP8GEMM_COMPILED_WGRAD_TILES(FP8GEMM_ENTRY)};
#undef FP8GEMM_ENTRY
  return table;
}

int find_wgrad_entry(int block_m, int block_n, bool k_grouped) {
  const KernelEntry* t = wgrad_registry();
  for (int i = 0; i < kNumWgradEntries; i += 2)
    if (t[i].block_m == block_m && t[i].block_n == block_n) return i + (k_grouped ? 1 : 0);
  return -1;
}

int stages_that_fit(const KernelEntry& e, int smem_limit) {
  return std::min(kMaxStagesCap, (smem_limit - e.smem_fixed) / e.smem_per_stage);
}

// Per-device facts, queried once (benign race: concurrent first calls store the same values).
struct DeviceFacts {
  std::atomic<int> num_sms{0};
  std::atomic<int> smem_limit{0};
};
DeviceFacts g_device_facts[kMaxDevices];
std::atomic<bool> g_smem_attribute_set[kNumEntries][kMaxDevices];
std::atomic<bool> g_grouped_smem_attribute_set[kNumGroupedEntries][kMaxDevices];
std::atomic<bool> g_wgrad_smem_attribute_set[kNumWgradEntries][kMaxDevices];

cudaError_t get_device_facts(int dev, int* num_sms, int* smem_limit) {
  if (dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  DeviceFacts& f = g_device_facts[dev];
  int sms = f.num_sms.load(std::memory_order_relaxed);
  int smem = f.smem_limit.load(std::memory_order_relaxed);
  if (sms == 0 || smem == 0) {
    cudaError_t err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    err = cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err != cudaSuccess) return err;
    smem = std::min(smem, kSmemPerBlockSm90);
    f.num_sms.store(sms, std::memory_order_relaxed);
    f.smem_limit.store(smem, std::memory_order_relaxed);
  }
  *num_sms = sms;
  *smem_limit = smem;
  return cudaSuccess;
}

// Raise the kernel's dynamic shared memory limit once per (kernel, device).
cudaError_t ensure_smem_attribute(std::atomic<bool>& done, const void* fn, int smem_limit) {
  if (done.load(std::memory_order_acquire)) return cudaSuccess;
  cudaError_t err = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_limit);
  if (err == cudaSuccess) done.store(true, std::memory_order_release);
  return err;
}

cudaError_t ensure_smem_attribute(int entry, int dev, int smem_limit) {
  return ensure_smem_attribute(g_smem_attribute_set[entry][dev], registry()[entry].fn, smem_limit);
}

// How many clusters of 2 can be resident at once (the persistent grid must not exceed it, or some
// clusters would only start after others finished). Queried once per (kernel, device, smem size).
cudaError_t max_active_clusters_of_2(int entry, int dev, int smem_bytes, int* out) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int>, int> cache;
  const auto key = std::make_tuple(entry, dev, smem_bytes);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) {
      *out = it->second;
      return cudaSuccess;
    }
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(2, 1, 1);
  cfg.blockDim = dim3(registry()[entry].num_threads, 1, 1);
  cfg.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 2;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  cudaError_t err = cudaOccupancyMaxActiveClusters(&clusters, registry()[entry].fn, &cfg);
  if (err != cudaSuccess) return err;
  std::lock_guard<std::mutex> lock(mu);
  cache[key] = clusters;
  *out = clusters;
  return cudaSuccess;
}

// M-blocks per band of the L2-friendly tile order: about `grid` tiles are in flight, covering
// band_m A row-blocks and grid / band_m B row-blocks; pick the band that minimises that footprint.
int choose_band_m(int grid, int block_m, int block_n) {
  int best = 8;
  long best_cost = LONG_MAX;
  for (int cand : {8, 16}) {  // even, so that cluster pairs (t, t^1) stay inside a band
    const long cost = static_cast<long>(cand) * block_m + static_cast<long>((grid + cand - 1) / cand) * block_n;
    if (cost < best_cost) best_cost = cost, best = cand;
  }
  return best;
}

bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) % a) == 0; }

}  // namespace

bool is_compiled(const GemmConfig& cfg, OutDtype out) {
  if (cfg.multicast != 1 && cfg.multicast != 2) return false;
  if (cfg.num_stages < 0 || cfg.num_sms < 0) return false;
  return find_entry(cfg.block_m, cfg.block_n, out) >= 0;
}

int max_stages(int block_m, int block_n, OutDtype out) {
  const int idx = find_entry(block_m, block_n, out);
  if (idx < 0) return 0;
  return std::max(0, stages_that_fit(registry()[idx], kSmemPerBlockSm90));
}

cudaError_t launch_fp8_gemm(const GemmProblem& p, const GemmConfig& cfg, cudaStream_t stream) {
  if (!is_compiled(cfg, p.out_dtype)) return cudaErrorInvalidValue;
  if (p.m < 0 || p.n < 0 || p.k <= 0) return cudaErrorInvalidValue;
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  const int out_bytes = p.out_dtype == OutDtype::kBF16 ? 2 : 4;
  // TMA: global row pitches must be multiples of 16 bytes, base addresses 16-byte aligned.
  if (p.k % 16 != 0 || (static_cast<long long>(p.n) * out_bytes) % 16 != 0) return cudaErrorInvalidValue;
  if (p.sfa_ld < p.m || p.sfa_ld % 4 != 0) return cudaErrorInvalidValue;
  if (!p.a || !p.b || !p.sfa || !p.sfb || !p.d) return cudaErrorInvalidValue;
  if (!aligned(p.a, 16) || !aligned(p.b, 16) || !aligned(p.sfa, 16) || !aligned(p.d, 16) || !aligned(p.sfb, 4))
    return cudaErrorInvalidValue;

  const int entry_idx = find_entry(cfg.block_m, cfg.block_n, p.out_dtype);
  const KernelEntry& e = registry()[entry_idx];

  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  int device_sms = 0, smem_limit = 0;
  err = get_device_facts(dev, &device_sms, &smem_limit);
  if (err != cudaSuccess) return err;

  const int num_stages = cfg.num_stages > 0 ? cfg.num_stages : stages_that_fit(e, smem_limit);
  const int smem_bytes = e.smem_fixed + num_stages * e.smem_per_stage;
  if (num_stages < 1 || smem_bytes > smem_limit) return cudaErrorInvalidValue;
  err = ensure_smem_attribute(entry_idx, dev, smem_limit);
  if (err != cudaSuccess) return err;

  const long long num_m_blocks = (p.m + e.block_m - 1) / e.block_m;
  const long long num_n_blocks = (p.n + e.block_n - 1) / e.block_n;
  const long long num_tiles = num_m_blocks * num_n_blocks;
  if (num_tiles > INT_MAX / 2) return cudaErrorInvalidValue;

  // Persistent grid: one CTA per SM (at most one per tile); even with clusters of 2.
  const int cluster = cfg.multicast;
  int grid = cfg.num_sms > 0 ? cfg.num_sms : device_sms;
  if (cluster == 2) {
    int clusters = 0;
    err = max_active_clusters_of_2(entry_idx, dev, smem_bytes, &clusters);
    if (err != cudaSuccess) return err;
    grid = std::min(grid / 2, clusters) * 2;
    grid = static_cast<int>(std::min<long long>(grid, (num_tiles + 1) / 2 * 2));
    if (grid < 2) return cudaErrorInvalidValue;
  } else {
    grid = static_cast<int>(std::min<long long>(grid, num_tiles));
    if (grid < 1) return cudaErrorInvalidValue;
  }

  // Tensor maps (encoded per call: they embed the pointers and shapes).
  const int num_k_blocks = (p.k + kBlockK - 1) / kBlockK;
  CUtensorMap tmap_a, tmap_b, tmap_sfa, tmap_d;
  {
    TensorMap2D d;
    d.base = p.a;
    d.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;  // e4m3 bytes
    d.rows = static_cast<uint64_t>(p.m);
    d.cols = static_cast<uint64_t>(p.k);
    d.row_pitch_bytes = static_cast<uint64_t>(p.k);
    d.box_rows = static_cast<uint32_t>(e.block_m);
    d.box_cols = kBlockK;  // 128 bytes = the 128B swizzle span
    d.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    if (!encode_tensor_map_2d(&tmap_a, d)) return cudaErrorInvalidValue;
  }
  {
    TensorMap2D d;
    d.base = p.b;
    d.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    d.rows = static_cast<uint64_t>(p.n);
    d.cols = static_cast<uint64_t>(p.k);
    d.row_pitch_bytes = static_cast<uint64_t>(p.k);
    d.box_rows = static_cast<uint32_t>(e.block_n);
    d.box_cols = kBlockK;
    d.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    if (!encode_tensor_map_2d(&tmap_b, d)) return cudaErrorInvalidValue;
  }
  {
    // SFA viewed as [num_k_blocks rows][M cols] with row pitch sfa_ld floats; box = (BLOCK_M + 4) x 1.
    TensorMap2D d;
    d.base = p.sfa;
    d.dtype = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    d.rows = static_cast<uint64_t>(num_k_blocks);
    d.cols = static_cast<uint64_t>(p.m);
    d.row_pitch_bytes = static_cast<uint64_t>(p.sfa_ld) * 4;
    d.box_rows = 1;
    d.box_cols = static_cast<uint32_t>(e.block_m + 4);  // kSfaBoxRows: aligned start, see kernel
    d.swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
    if (!encode_tensor_map_2d(&tmap_sfa, d)) return cudaErrorInvalidValue;
  }
  {
    TensorMap2D d;
    d.base = p.d;
    d.dtype = p.out_dtype == OutDtype::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    d.rows = static_cast<uint64_t>(p.m);
    d.cols = static_cast<uint64_t>(p.n);
    d.row_pitch_bytes = static_cast<uint64_t>(p.n) * out_bytes;
    d.box_rows = static_cast<uint32_t>(e.d_box_rows);
    d.box_cols = static_cast<uint32_t>(e.d_box_cols);
    d.swizzle = swizzle_for_bytes(e.d_swizzle_bytes);
    d.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
    if (!encode_tensor_map_2d(&tmap_d, d)) return cudaErrorInvalidValue;
  }

  GemmKernelArgs args;
  args.sfb = p.sfb;
  args.n = p.n;
  args.num_k_blocks = num_k_blocks;
  args.num_stages = num_stages;
  DenseSchedulerParams sched;
  sched.m = p.m;
  sched.n = p.n;
  sched.band_m = choose_band_m(grid, e.block_m, e.block_n);
  EmptyEpilogueParams epi;

  CUtensorMap tmap_sfb_unused = {};  // only the wgrad kernels (per-row B scales) read it
  void* kernel_args[] = {&tmap_a, &tmap_b, &tmap_sfa, &tmap_d, &args, &sched, &epi, &tmap_sfb_unused};
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(static_cast<unsigned>(grid), 1, 1);
  lc.blockDim = dim3(static_cast<unsigned>(e.num_threads), 1, 1);
  lc.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  lc.stream = stream;
  cudaLaunchAttribute attr;
  if (cluster == 2) {
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 2;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    lc.attrs = &attr;
    lc.numAttrs = 1;
  }
  return cudaLaunchKernelExC(&lc, e.fn, kernel_args);
}

bool is_compiled_grouped(const GemmConfig& cfg, OutDtype out) {
  if (cfg.multicast != 1) return false;
  if (cfg.num_stages < 0 || cfg.num_sms < 0) return false;
  return find_grouped_entry(cfg.block_m, cfg.block_n, out) >= 0;
}

// Grouped GEMM: zero the rows no tile writes (zero_rows.cu), then the persistent kernel with the
// GroupedScheduler, which derives the tile list from the device-side group sizes. The host knows
// only an upper bound of the number of tiles (to cap the grid): per group at most one partial
// M-tile more than its rows need.
cudaError_t launch_fp8_grouped_gemm(const GroupedGemmProblem& p, const GemmConfig& cfg, cudaStream_t stream) {
  if (!is_compiled_grouped(cfg, p.out_dtype)) return cudaErrorInvalidValue;
  if (p.m < 0 || p.n < 0 || p.k <= 0 || p.num_groups < 0) return cudaErrorInvalidValue;
  const long long total_rows = p.masked ? static_cast<long long>(p.num_groups) * p.m : p.m;
  if (total_rows == 0 || p.n == 0) return cudaSuccess;  // D is empty
  const int out_bytes = p.out_dtype == OutDtype::kBF16 ? 2 : 4;
  if (p.k % 16 != 0 || (static_cast<long long>(p.n) * out_bytes) % 16 != 0) return cudaErrorInvalidValue;
  // Row indices (+ a tile) and B's rows (G * N) are int32 coordinates in the kernel.
  if (total_rows > INT_MAX - 256 || static_cast<long long>(p.num_groups) * p.n > INT_MAX) return cudaErrorInvalidValue;
  if (p.sfa_ld < total_rows || p.sfa_ld % 4 != 0) return cudaErrorInvalidValue;
  if (!p.d || (p.num_groups > 0 && (!p.a || !p.b || !p.sfa || !p.sfb || !p.group_sizes))) return cudaErrorInvalidValue;
  if (!aligned(p.a, 16) || !aligned(p.b, 16) || !aligned(p.sfa, 16) || !aligned(p.d, 16) || !aligned(p.sfb, 4) ||
      !aligned(p.group_sizes, 4))
    return cudaErrorInvalidValue;

  const int entry_idx = find_grouped_entry(cfg.block_m, cfg.block_n, p.out_dtype);
  const KernelEntry& e = grouped_registry()[entry_idx];
  const int num_k_blocks = (p.k + kBlockK - 1) / kBlockK;
  const long long num_sfb_rows = (p.n + 127) / 128;
  const long long sfb_group_stride = num_sfb_rows * num_k_blocks;
  if (sfb_group_stride * p.num_groups > INT_MAX) return cudaErrorInvalidValue;

  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  int device_sms = 0, smem_limit = 0;
  err = get_device_facts(dev, &device_sms, &smem_limit);
  if (err != cudaSuccess) return err;

  const int num_stages = cfg.num_stages > 0 ? cfg.num_stages : stages_that_fit(e, smem_limit);
  const int smem_bytes = e.smem_fixed + num_stages * e.smem_per_stage;
  if (num_stages < 1 || smem_bytes > smem_limit) return cudaErrorInvalidValue;

  // Upper bound of the tiles: contiguous sum_g cdiv(rows_g, BM) <= cdiv(M, BM) + (non-empty groups).
  const long long num_n_blocks = (p.n + e.block_n - 1) / e.block_n;
  const long long max_m_tiles =
      p.masked ? static_cast<long long>(p.num_groups) * ((p.m + e.block_m - 1) / e.block_m)
               : (p.m + e.block_m - 1) / e.block_m + std::min<long long>(p.num_groups, p.m);
  const long long max_tiles = max_m_tiles * num_n_blocks;
  if (max_tiles > INT_MAX / 2) return cudaErrorInvalidValue;

  // Zeroing of the rows no tile writes (launched below, right before the GEMM).
  const int zero_blocks = 4 * device_sms;
  const long long row_bytes = static_cast<long long>(p.n) * out_bytes;
  auto launch_zero = [&]() {
    return p.masked ? launch_zero_rows_masked(p.d, p.num_groups, p.m, row_bytes, p.group_sizes, zero_blocks, stream)
                    : launch_zero_rows_contiguous(p.d, p.m, row_bytes, p.group_sizes, p.num_groups, zero_blocks,
                                                  stream);
  };
  if (max_tiles == 0 || p.num_groups == 0) return launch_zero();  // no tile at all: D is all zero

  err = ensure_smem_attribute(g_grouped_smem_attribute_set[entry_idx][dev], e.fn, smem_limit);
  if (err != cudaSuccess) return err;
  int grid = cfg.num_sms > 0 ? cfg.num_sms : device_sms;
  grid = static_cast<int>(std::min<long long>(grid, max_tiles));

  CUtensorMap tmap_a, tmap_b, tmap_sfa, tmap_d;
  {
    TensorMap2D d;
    d.base = p.a;
    d.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;  // e4m3 bytes
    d.rows = static_cast<uint64_t>(total_rows);
    d.cols = static_cast<uint64_t>(p.k);
    d.row_pitch_bytes = static_cast<uint64_t>(p.k);
    d.box_rows = static_cast<uint32_t>(e.block_m);
    d.box_cols = kBlockK;
    d.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    if (!encode_tensor_map_2d(&tmap_a, d)) return cudaErrorInvalidValue;
  }
  {
    // All groups' B as one [G * N, K] tensor: a ragged last N-tile of group g reads rows of group
    // g + 1 (or zeros past the end) into columns >= N, which are never stored.
    TensorMap2D d;
    d.base = p.b;
    d.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    d.rows = static_cast<uint64_t>(p.num_groups) * static_cast<uint64_t>(p.n);
    d.cols = static_cast<uint64_t>(p.k);
    d.row_pitch_bytes = static_cast<uint64_t>(p.k);
    d.box_rows = static_cast<uint32_t>(e.block_n);
    d.box_cols = kBlockK;
    d.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    if (!encode_tensor_map_2d(&tmap_b, d)) return cudaErrorInvalidValue;
  }
  {
    TensorMap2D d;
    d.base = p.sfa;
    d.dtype = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    d.rows = static_cast<uint64_t>(num_k_blocks);
    d.cols = static_cast<uint64_t>(total_rows);
    d.row_pitch_bytes = static_cast<uint64_t>(p.sfa_ld) * 4;
    d.box_rows = 1;
    d.box_cols = static_cast<uint32_t>(e.block_m + 4);  // kSfaBoxRows: aligned start, see kernel
    d.swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
    if (!encode_tensor_map_2d(&tmap_sfa, d)) return cudaErrorInvalidValue;
  }
  {
    TensorMap2D d;
    d.base = p.d;
    d.dtype = p.out_dtype == OutDtype::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    d.rows = static_cast<uint64_t>(total_rows);
    d.cols = static_cast<uint64_t>(p.n);
    d.row_pitch_bytes = static_cast<uint64_t>(row_bytes);
    d.box_rows = static_cast<uint32_t>(e.d_box_rows);
    d.box_cols = static_cast<uint32_t>(e.d_box_cols);
    d.swizzle = swizzle_for_bytes(e.d_swizzle_bytes);
    d.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
    if (!encode_tensor_map_2d(&tmap_d, d)) return cudaErrorInvalidValue;
  }

  GemmKernelArgs args;
  args.sfb = p.sfb;
  args.n = p.n;
  args.num_k_blocks = num_k_blocks;
  args.num_stages = num_stages;
  GroupedSchedulerParams sched;
  sched.sizes = p.group_sizes;
  sched.num_groups = p.num_groups;
  sched.m = p.m;
  sched.n = p.n;
  sched.band_m = choose_band_m(grid, e.block_m, e.block_n);
  sched.masked = p.masked ? 1 : 0;
  sched.sfb_group_stride = static_cast<int>(sfb_group_stride);
  RowMaskEpilogueParams epi;
  epi.d = p.d;
  epi.ld = p.n;

  // 1. The zero kernel: ordinary stream order after the previous work.
  err = launch_zero();
  if (err != cudaSuccess) return err;

  // 2. The GEMM.
  CUtensorMap tmap_sfb_unused = {};  // only the wgrad kernels (per-row B scales) read it
  void* kernel_args[] = {&tmap_a, &tmap_b, &tmap_sfa, &tmap_d, &args, &sched, &epi, &tmap_sfb_unused};
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(static_cast<unsigned>(grid), 1, 1);
  lc.blockDim = dim3(static_cast<unsigned>(e.num_threads), 1, 1);
  lc.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  lc.stream = stream;
  // Programmatic dependent launch: the GEMM's CTAs may start (barrier init, descriptor prefetch)
  // while the zero kernel runs; the kernel's griddep_wait() orders everything after it.
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  lc.attrs = &attr;
  lc.numAttrs = 1;
  return cudaLaunchKernelExC(&lc, e.fn, kernel_args);
}

// ------------------------------------------------------------------------------------------------
// Weight-gradient GEMMs (per-row B scales, f32 output): dense and k-grouped.
// ------------------------------------------------------------------------------------------------

bool is_compiled_wgrad(const GemmConfig& cfg) {
  if (cfg.multicast != 1) return false;
  if (cfg.num_stages < 0 || cfg.num_sms < 0) return false;
  return find_wgrad_entry(cfg.block_m, cfg.block_n, false) >= 0;
}

int max_stages_wgrad(int block_m, int block_n) {
  const int idx = find_wgrad_entry(block_m, block_n, false);
  if (idx < 0) return 0;
  return std::max(0, stages_that_fit(wgrad_registry()[idx], kSmemPerBlockSm90));
}

namespace {

// What the two wgrad launchers share: checks of the operands, the configuration, the tensor maps
// and the launch. `rows_d` = rows of D (M, or G * M), `max_tiles` = the tiles of the grid.
struct WgradOperands {
  const void* a;
  const void* b;
  const float* sfa;
  int sfa_ld;
  const float* sfb;
  int sfb_ld;
  float* d;
  int m, n, t;
};

bool wgrad_operands_ok(const WgradOperands& p) {
  if (p.t % 16 != 0 || p.n % 4 != 0) return false;  // TMA row pitches: 16-byte multiples
  if (p.sfa_ld < p.m || p.sfa_ld % 4 != 0 || p.sfb_ld < p.n || p.sfb_ld % 4 != 0) return false;
  if (!p.a || !p.b || !p.sfa || !p.sfb || !p.d) return false;
  return aligned(p.a, 16) && aligned(p.b, 16) && aligned(p.sfa, 16) && aligned(p.sfb, 16) && aligned(p.d, 16);
}

template <class SchedParams, class EpiParams>
cudaError_t launch_wgrad_kernel(const WgradOperands& p, long long rows_d, long long max_tiles, int entry_idx,
                                const GemmConfig& cfg, SchedParams sched, const EpiParams& epi,
                                cudaStream_t stream) {
  const KernelEntry& e = wgrad_registry()[entry_idx];
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  int device_sms = 0, smem_limit = 0;
  err = get_device_facts(dev, &device_sms, &smem_limit);
  if (err != cudaSuccess) return err;

  const int num_stages = cfg.num_stages > 0 ? cfg.num_stages : stages_that_fit(e, smem_limit);
  const int smem_bytes = e.smem_fixed + num_stages * e.smem_per_stage;
  // >= 2 stages: the deferred-promotion loop waits for stage kb+1 while it still holds kb.
  if (num_stages < 2 || smem_bytes > smem_limit) return cudaErrorInvalidValue;
  err = ensure_smem_attribute(g_wgrad_smem_attribute_set[entry_idx][dev], e.fn, smem_limit);
  if (err != cudaSuccess) return err;
  int grid = cfg.num_sms > 0 ? cfg.num_sms : device_sms;
  grid = static_cast<int>(std::min<long long>(grid, max_tiles));
  if (grid < 1) return cudaErrorInvalidValue;

  const int num_k_blocks = (p.t + kBlockK - 1) / kBlockK;
  CUtensorMap tmap_a, tmap_b, tmap_sfa, tmap_sfb, tmap_d;
  auto operand_map = [&](CUtensorMap* map, const void* base, int rows, int box_rows) {
    TensorMap2D d;
    d.base = base;
    d.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;  // e4m3 bytes
    d.rows = static_cast<uint64_t>(rows);
    d.cols = static_cast<uint64_t>(p.t);
    d.row_pitch_bytes = static_cast<uint64_t>(p.t);
    d.box_rows = static_cast<uint32_t>(box_rows);
    d.box_cols = kBlockK;  // 128 bytes = the 128B swizzle span
    d.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    return encode_tensor_map_2d(map, d);
  };
  // Scales viewed as [num_k_blocks rows][rows cols] with row pitch ld floats; box = box_cols x 1.
  auto scale_map = [&](CUtensorMap* map, const float* base, int rows, int ld, int box_cols) {
    TensorMap2D d;
    d.base = base;
    d.dtype = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    d.rows = static_cast<uint64_t>(num_k_blocks);
    d.cols = static_cast<uint64_t>(rows);
    d.row_pitch_bytes = static_cast<uint64_t>(ld) * 4;
    d.box_rows = 1;
    d.box_cols = static_cast<uint32_t>(box_cols);
    d.swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
    return encode_tensor_map_2d(map, d);
  };
  if (!operand_map(&tmap_a, p.a, p.m, e.block_m) || !operand_map(&tmap_b, p.b, p.n, e.block_n) ||
      !scale_map(&tmap_sfa, p.sfa, p.m, p.sfa_ld, e.block_m + 4) ||  // kSfaBoxRows: aligned start
      !scale_map(&tmap_sfb, p.sfb, p.n, p.sfb_ld, e.block_n))         // kSfbBoxCols
    return cudaErrorInvalidValue;
  {
    TensorMap2D d;
    d.base = p.d;
    d.dtype = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    d.rows = static_cast<uint64_t>(rows_d);
    d.cols = static_cast<uint64_t>(p.n);
    d.row_pitch_bytes = static_cast<uint64_t>(p.n) * 4;
    d.box_rows = static_cast<uint32_t>(e.d_box_rows);
    d.box_cols = static_cast<uint32_t>(e.d_box_cols);
    d.swizzle = swizzle_for_bytes(e.d_swizzle_bytes);
    d.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
    if (!encode_tensor_map_2d(&tmap_d, d)) return cudaErrorInvalidValue;
  }

  GemmKernelArgs args;
  args.sfb = nullptr;  // per-row B scales come through tmap_sfb
  args.n = p.n;
  args.num_k_blocks = num_k_blocks;
  args.num_stages = num_stages;
  sched.band_m = choose_band_m(grid, e.block_m, e.block_n);
  EpiParams epi_copy = epi;

  void* kernel_args[] = {&tmap_a, &tmap_b, &tmap_sfa, &tmap_d, &args, &sched, &epi_copy, &tmap_sfb};
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(static_cast<unsigned>(grid), 1, 1);
  lc.blockDim = dim3(static_cast<unsigned>(e.num_threads), 1, 1);
  lc.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  lc.stream = stream;
  return cudaLaunchKernelExC(&lc, e.fn, kernel_args);
}

}  // namespace

cudaError_t launch_fp8_gemm_wgrad(const WgradGemmProblem& p, const GemmConfig& cfg, cudaStream_t stream) {
  if (!is_compiled_wgrad(cfg)) return cudaErrorInvalidValue;
  if (p.m < 0 || p.n < 0 || p.t <= 0) return cudaErrorInvalidValue;
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  const WgradOperands ops{p.a, p.b, p.sfa, p.sfa_ld, p.sfb, p.sfb_ld, p.d, p.m, p.n, p.t};
  if (!wgrad_operands_ok(ops)) return cudaErrorInvalidValue;
  const int entry_idx = find_wgrad_entry(cfg.block_m, cfg.block_n, /*k_grouped=*/false);
  const KernelEntry& e = wgrad_registry()[entry_idx];
  const long long num_tiles =
      static_cast<long long>((p.m + e.block_m - 1) / e.block_m) * ((p.n + e.block_n - 1) / e.block_n);
  if (num_tiles > INT_MAX / 2) return cudaErrorInvalidValue;
  DenseSchedulerParams sched;
  sched.m = p.m;
  sched.n = p.n;
  sched.band_m = 1;  // set by launch_wgrad_kernel from the grid
  return launch_wgrad_kernel(ops, p.m, num_tiles, entry_idx, cfg, sched, EmptyEpilogueParams{}, stream);
}

cudaError_t launch_fp8_grouped_gemm_wgrad(const GroupedWgradGemmProblem& p, const GemmConfig& cfg,
                                          cudaStream_t stream) {
  if (!is_compiled_wgrad(cfg)) return cudaErrorInvalidValue;
  if (p.m < 0 || p.n < 0 || p.t <= 0 || p.num_groups < 0) return cudaErrorInvalidValue;
  if (p.m == 0 || p.n == 0 || p.num_groups == 0) return cudaSuccess;  // D is empty
  const WgradOperands ops{p.a, p.b, p.sfa, p.sfa_ld, p.sfb, p.sfb_ld, p.d, p.m, p.n, p.t};
  if (!wgrad_operands_ok(ops) || !p.group_sizes || !aligned(p.group_sizes, 4)) return cudaErrorInvalidValue;
  const int entry_idx = find_wgrad_entry(cfg.block_m, cfg.block_n, /*k_grouped=*/true);
  const KernelEntry& e = wgrad_registry()[entry_idx];
  // D rows (G * M, plus a tile) and the tile indices are int32 in the kernel.
  const long long rows_d = static_cast<long long>(p.num_groups) * p.m;
  const long long num_tiles = static_cast<long long>(p.num_groups) * ((p.m + e.block_m - 1) / e.block_m) *
                              ((p.n + e.block_n - 1) / e.block_n);
  if (rows_d > INT_MAX - 256 || num_tiles > INT_MAX / 2) return cudaErrorInvalidValue;
  KGroupedWgradSchedulerParams sched;
  sched.sizes = p.group_sizes;
  sched.num_groups = p.num_groups;
  sched.m = p.m;
  sched.n = p.n;
  sched.num_k_blocks = (p.t + kBlockK - 1) / kBlockK;
  sched.band_m = 1;  // set by launch_wgrad_kernel from the grid
  RowMaskEpilogueParams epi;
  epi.d = p.d;
  epi.ld = p.n;
  return launch_wgrad_kernel(ops, rows_d, num_tiles, entry_idx, cfg, sched, epi, stream);
}

}  // namespace fp8gemm
