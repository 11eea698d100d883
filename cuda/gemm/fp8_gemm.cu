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

// Defined (explicitly instantiated) in fp8_gemm_inst_*.cu.
FP8GEMM_COMPILED_TILES(FP8GEMM_EXTERN_TILE)
FP8GEMM_SHORT_K_TILES(FP8GEMM_EXTERN_SHORT_K_TILE)
FP8GEMM_POSTED_LOOP_TILES(FP8GEMM_EXTERN_POSTED_LOOP_TILE)
FP8GEMM_COMPILED_GROUPED_TILES(FP8GEMM_EXTERN_GROUPED_TILE)
FP8GEMM_COMPILED_WGRAD_TILES(FP8GEMM_EXTERN_WGRAD_TILE)

namespace fp8gemm {

#ifdef FP8GEMM_EXPERIMENT_TIMELINE
// The timeline buffer of every launch (gemm/timeline.cuh; harness-only builds), allocated once.
unsigned long long* experiment_timeline_buffer() {
  static unsigned long long* buf = [] {
    unsigned long long* p = nullptr;
    cudaMalloc(&p, sizeof(unsigned long long) * timeline::kPerCta * timeline::kMaxCtas);
    return p;
  }();
  return buf;
}
#endif

namespace {

using detail::KernelEntry;

// The public constexpr tile lists (fp8_gemm.h) and the internal X-macros that instantiate the
// kernels must name the same tiles: same count, and every instantiated tile is listed.
template <int kListed, int kInstantiated>
constexpr bool same_tiles(const CompiledTile (&listed)[kListed], const CompiledTile (&instantiated)[kInstantiated]) {
  if (kListed != kInstantiated) return false;
  for (const CompiledTile& t : instantiated) {
    bool found = false;
    for (const CompiledTile& l : listed) found = found || (l.block_m == t.block_m && l.block_n == t.block_n);
    if (!found) return false;
  }
  return true;
}
#define FP8GEMM_TILE_LITERAL(BM, BN) CompiledTile{BM, BN},
constexpr CompiledTile kInstantiatedTiles[] = {FP8GEMM_COMPILED_TILES(FP8GEMM_TILE_LITERAL)};
constexpr CompiledTile kInstantiatedGroupedTiles[] = {FP8GEMM_COMPILED_GROUPED_TILES(FP8GEMM_TILE_LITERAL)};
constexpr CompiledTile kInstantiatedWgradTiles[] = {FP8GEMM_COMPILED_WGRAD_TILES(FP8GEMM_TILE_LITERAL)};
#undef FP8GEMM_TILE_LITERAL
static_assert(same_tiles(kCompiledTiles, kInstantiatedTiles), "kCompiledTiles and FP8GEMM_COMPILED_TILES differ");
static_assert(same_tiles(kCompiledGroupedTiles, kInstantiatedGroupedTiles),
              "kCompiledGroupedTiles and FP8GEMM_COMPILED_GROUPED_TILES differ");
static_assert(same_tiles(kCompiledWgradTiles, kInstantiatedWgradTiles),
              "kCompiledWgradTiles and FP8GEMM_COMPILED_WGRAD_TILES differ");

constexpr int kSmemPerBlockSm90 = 232448;  // 227 KB: per-block opt-in maximum of sm_90
constexpr int kMaxStagesCap = 32;          // deeper pipelines buy nothing
constexpr int kMaxDevices = 64;
#define FP8GEMM_COUNT_K_BOUND(BM, BN, KB) +1
constexpr int kNumKBoundTiles =
    0 FP8GEMM_SHORT_K_TILES(FP8GEMM_COUNT_K_BOUND) FP8GEMM_POSTED_LOOP_TILES(FP8GEMM_COUNT_K_BOUND);
#undef FP8GEMM_COUNT_K_BOUND
constexpr int kNumEntries = kNumKBoundTiles + 2 * kNumCompiledTiles;  // the K-bound ones: bf16 only

// The K-bound kernels first, the smallest bound first: find_in returns the first entry that fits.
const KernelEntry* registry() {
#define FP8GEMM_SHORT_K_ENTRY(BM, BN, KB) detail::kernel_entry<BM, BN, OutDtype::kBF16, KB>(),
#define FP8GEMM_POSTED_LOOP_ENTRY(BM, BN, KB) detail::kernel_entry<BM, BN, OutDtype::kBF16, 0, KB>(),
#define FP8GEMM_ENTRY(BM, BN) \
  detail::kernel_entry<BM, BN, OutDtype::kBF16>(), detail::kernel_entry<BM, BN, OutDtype::kF32>(),
  static const KernelEntry table[kNumEntries] = {FP8GEMM_SHORT_K_TILES(FP8GEMM_SHORT_K_ENTRY)
                                                     FP8GEMM_POSTED_LOOP_TILES(FP8GEMM_POSTED_LOOP_ENTRY)
                                                         FP8GEMM_COMPILED_TILES(FP8GEMM_ENTRY)};
#undef FP8GEMM_ENTRY
#undef FP8GEMM_POSTED_LOOP_ENTRY
#undef FP8GEMM_SHORT_K_ENTRY
  return table;
}

// Index of the first (block_m, block_n, out) kernel in a registry table that runs num_k_blocks
// k-blocks (any count: not a short-K kernel) in `waves` waves of tiles or more, or -1 if not compiled.
int find_in(const KernelEntry* table, int count, int block_m, int block_n, OutDtype out,
            int num_k_blocks = INT_MAX, long long waves = LLONG_MAX) {
  for (int i = 0; i < count; ++i)
    if (table[i].block_m == block_m && table[i].block_n == block_n && table[i].out == out &&
        (table[i].max_k_blocks == 0 || num_k_blocks <= table[i].max_k_blocks) && waves >= table[i].min_waves)
      return i;
  return -1;
}

int find_entry(int block_m, int block_n, OutDtype out, int num_k_blocks = INT_MAX, long long waves = LLONG_MAX) {
  return find_in(registry(), kNumEntries, block_m, block_n, out, num_k_blocks, waves);
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

// Wgrad kernels: two tables (dense, k-grouped), each with a bf16 and an f32 entry per tile of
// FP8GEMM_COMPILED_WGRAD_TILES.
constexpr int kNumWgradEntries = 2 * kNumCompiledWgradTiles;

const KernelEntry* wgrad_registry(bool k_grouped) {
#define FP8GEMM_ENTRY(BM, BN) \
  detail::wgrad_kernel_entry<BM, BN, OutDtype::kBF16>(), detail::wgrad_kernel_entry<BM, BN, OutDtype::kF32>(),
  static const KernelEntry dense[kNumWgradEntries] = {FP8GEMM_COMPILED_WGRAD_TILES(FP8GEMM_ENTRY)};
#undef FP8GEMM_ENTRY
#define FP8GEMM_ENTRY(BM, BN)                                     \
  detail::kgrouped_wgrad_kernel_entry<BM, BN, OutDtype::kBF16>(), \
      detail::kgrouped_wgrad_kernel_entry<BM, BN, OutDtype::kF32>(),
  static const KernelEntry grouped[kNumWgradEntries] = {FP8GEMM_COMPILED_WGRAD_TILES(FP8GEMM_ENTRY)};
#undef FP8GEMM_ENTRY
  return k_grouped ? grouped : dense;
}

int find_wgrad_entry(int block_m, int block_n, bool k_grouped, OutDtype out) {
  return find_in(wgrad_registry(k_grouped), kNumWgradEntries, block_m, block_n, out);
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
std::atomic<bool> g_wgrad_smem_attribute_set[2][kNumWgradEntries][kMaxDevices];  // [k_grouped]

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

// Whole waves of `tiles` tiles on the SMs a launch of `cfg` uses (KernelEntry::min_waves).
long long waves_of(long long tiles, const GemmConfig& cfg) {
  int dev = 0, sms = 0, smem_limit = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || get_device_facts(dev, &sms, &smem_limit) != cudaSuccess) return 0;
  if (cfg.num_sms > 0) sms = cfg.num_sms;
  return sms > 0 ? tiles / sms : 0;
}

// Raise the kernel's dynamic shared memory limit once per (kernel, device).
cudaError_t ensure_smem_attribute(std::atomic<bool>& done, const void* fn, int smem_limit) {
  if (done.load(std::memory_order_acquire)) return cudaSuccess;
  cudaError_t err = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_limit);
  if (err == cudaSuccess) done.store(true, std::memory_order_release);
  return err;
}

// Launch attribute of clusters of `size` CTAs: pairs (TMA multicast of A or B), or the CTAs of a
// split-K tile.
cudaLaunchAttribute cluster_attribute(int size) {
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(size);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  return attr;
}

// How many clusters of `size` CTAs can be resident at once (a persistent grid of pairs must not
// exceed it, or some clusters would only start after others finished). Queried once per (kernel,
// device, smem size, cluster size).
cudaError_t max_active_clusters(const KernelEntry& e, int dev, int smem_bytes, int size, int* out) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int, int>, int> cache;
  const auto key = std::make_tuple(e.fn, dev, smem_bytes, size);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) {
      *out = it->second;
      return cudaSuccess;
    }
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(size, 1, 1);
  cfg.blockDim = dim3(e.num_threads, 1, 1);
  cfg.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  cudaLaunchAttribute attr = cluster_attribute(size);
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  cudaError_t err = cudaOccupancyMaxActiveClusters(&clusters, e.fn, &cfg);
  if (err != cudaSuccess) return err;
  std::lock_guard<std::mutex> lock(mu);
  cache[key] = clusters;
  *out = clusters;
  return cudaSuccess;
}

// Blocks per band of the L2-friendly tile order: about `grid` tiles are in flight, covering `band`
// row-blocks of the banded operand (rows of banded_block each) and grid / band of the other
// (other_block rows each); pick the band that minimises that footprint.
int choose_band(int grid, int banded_block, int other_block) {
  int best = 8;
  long best_cost = LONG_MAX;
  for (int cand : {8, 16}) {  // even, so that cluster pairs (t, t^1) stay inside a band
    const long cost =
        static_cast<long>(cand) * banded_block + static_cast<long>((grid + cand - 1) / cand) * other_block;
    if (cost < best_cost) best_cost = cost, best = cand;
  }
  return best;
}

bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) % a) == 0; }

// ------------------------------------------------------------------------------------------------
// Launch steps shared by the dense, grouped and wgrad launchers.
// ------------------------------------------------------------------------------------------------

// The current device and the pipeline a launch runs with there.
struct LaunchSetup {
  int dev = 0, device_sms = 0, smem_limit = 0;
  int num_stages = 0, smem_bytes = 0;
};

// Fills `s` for kernel `e`: the pipeline depth is cfg.num_stages, or as many stages as fit next to
// `extra_smem` bytes the kernel needs besides (two-wave tiles: the staged B scales).
// cudaErrorInvalidValue if that is fewer than `min_stages` or does not fit the shared memory.
cudaError_t setup_launch(const KernelEntry& e, const GemmConfig& cfg, int min_stages, LaunchSetup* s,
                         int extra_smem = 0) {
  cudaError_t err = cudaGetDevice(&s->dev);
  if (err != cudaSuccess) return err;
  err = get_device_facts(s->dev, &s->device_sms, &s->smem_limit);
  if (err != cudaSuccess) return err;
  s->num_stages = cfg.num_stages > 0 ? cfg.num_stages : stages_that_fit(e, s->smem_limit - extra_smem);
  s->smem_bytes = e.smem_fixed + extra_smem + s->num_stages * e.smem_per_stage;
  if (s->num_stages < min_stages || s->smem_bytes > s->smem_limit) return cudaErrorInvalidValue;
  return cudaSuccess;
}

// The kernels stage each tile's B scales in shared memory: GemmKernelArgs::sfb_staged_floats for
// kernel `e`, and the bytes of its buffers (two per math warpgroup: fp8_gemm_kernel.cuh).
int sfb_staged_floats_of(const KernelEntry& e, int num_k_blocks) {
  return e.sfb_staged_rows * ((num_k_blocks + 3) / 4 * 4);
}
int sfb_staging_bytes(int sfb_staged_floats) { return 2 * 2 * sfb_staged_floats * 4; }
// The TileRing of a kernel whose producer posts the tiles (KernelEntry::posts_tiles).
int tile_ring_bytes(const KernelEntry& e) { return e.posts_tiles ? static_cast<int>(sizeof(TileRing)) : 0; }

// CTAs of the persistent grid of kernel `e`: cfg.num_sms (0: every SM), at most one per tile; with
// clusters of 2 (cfg.multicast == 2) an even number, at most as many as can be resident at once.
cudaError_t persistent_grid(const KernelEntry& e, const GemmConfig& cfg, const LaunchSetup& s, long long max_tiles,
                            int* grid) {
  const int sms = cfg.num_sms > 0 ? cfg.num_sms : s.device_sms;
  if (cfg.multicast != 2) {
    *grid = static_cast<int>(std::min<long long>(sms, max_tiles));
    return *grid >= 1 ? cudaSuccess : cudaErrorInvalidValue;
  }
  int clusters = 0;
  cudaError_t err = max_active_clusters(e, s.dev, s.smem_bytes, 2, &clusters);
  if (err != cudaSuccess) return err;
  *grid = static_cast<int>(std::min<long long>(std::min(sms / 2, clusters) * 2LL, (max_tiles + 1) / 2 * 2));
  return *grid >= 2 ? cudaSuccess : cudaErrorInvalidValue;
}

// The band of kernel `e` on `grid` CTAs (dense and k-grouped wgrad schedulers), and its axis:
// pairs sharing A walk bands of N-blocks (neighbouring N tiles share the M-block), the others bands
// of M-blocks.
template <class SchedParams>
int set_band_axis(SchedParams* sched, const KernelEntry& e, const GemmConfig& cfg, int grid) {
  sched->band_on_n = cfg.multicast == 2 && cfg.multicast_a != 0;
  return sched->band_on_n ? choose_band(grid, e.block_n, e.block_m) : choose_band(grid, e.block_m, e.block_n);
}
// The dense scheduler takes the banded order with its divisors' magic numbers (FastDiv,
// scheduler.cuh); the k-grouped wgrad scheduler the band alone (it divides plainly on the device).
void set_tile_order(DenseSchedulerParams* sched, const KernelEntry& e, const GemmConfig& cfg, int grid) {
  const int band = set_band_axis(sched, e, cfg, grid);
  const int m_blocks = (sched->m + e.block_m - 1) / e.block_m, n_blocks = (sched->n + e.block_n - 1) / e.block_n;
  sched->order = BandedOrder(band, sched->band_on_n ? m_blocks : n_blocks);
  // The halved tail (scheduler.cuh): a last wave of at most grid / 2 tiles runs as twice as many
  // 128-row halves. Only where both halves of every tile have rows (the last M-block has none or
  // more than 128 rows to spare) and pairs stay whole; the one-wave path needs skip_empty_waves.
  const long long tiles = static_cast<long long>(m_blocks) * n_blocks;
  const int tail = static_cast<int>(tiles % grid);
  const int last_rows = sched->m % e.block_m;
  if (e.block_m == 256 && sched->k_splits == 1 && tail_halves_default() && skip_empty_waves_default() &&
      tiles > grid && tail > 0 && 2 * tail <= grid && (last_rows == 0 || last_rows > 128) &&
      (cfg.multicast != 2 || tail % 2 == 0))
    sched->tail_tiles = tail;
}
void set_tile_order(KGroupedWgradSchedulerParams* sched, const KernelEntry& e, const GemmConfig& cfg, int grid) {
  sched->band = set_band_axis(sched, e, cfg, grid);
}
// The grouped scheduler bands M-blocks (no clusters), inside each group.
void set_tile_order(GroupedSchedulerParams* sched, const KernelEntry& e, const GemmConfig& /*cfg*/, int grid) {
  sched->order = BandedOrder(choose_band(grid, e.block_m, e.block_n), (sched->n + e.block_n - 1) / e.block_n);
}

// Tensor maps (encoded per call: they embed the pointers and shapes).

// An e4m3 operand [rows, k], K-major: boxes of box_rows rows x 128 bytes (the 128B swizzle span).
bool encode_operand_map(CUtensorMap* map, const void* base, long long rows, int k, int box_rows) {
  TensorMap2D d;
  d.base = base;
  d.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;  // e4m3 bytes
  d.rows = static_cast<uint64_t>(rows);
  d.cols = static_cast<uint64_t>(k);
  d.row_pitch_bytes = static_cast<uint64_t>(k);
  d.box_rows = static_cast<uint32_t>(box_rows);
  d.box_cols = kBlockK;
  d.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  return encode_tensor_map_2d(map, d);
}

// MN-major scales viewed as [num_k_blocks rows][cols] with a row pitch of ld floats; box = box_cols x 1.
bool encode_scale_map(CUtensorMap* map, const float* base, int num_k_blocks, long long cols, int ld, int box_cols) {
  TensorMap2D d;
  d.base = base;
  d.dtype = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  d.rows = static_cast<uint64_t>(num_k_blocks);
  d.cols = static_cast<uint64_t>(cols);
  d.row_pitch_bytes = static_cast<uint64_t>(ld) * 4;
  d.box_rows = 1;
  d.box_cols = static_cast<uint32_t>(box_cols);
  d.swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  return encode_tensor_map_2d(map, d);
}

// SFA boxes are GemmTraits::kSfaBoxRows floats (BLOCK_M + 4: they start at the tile's first row
// rounded down to a multiple of 4, 16-byte aligned; see the kernel).
int sfa_box_cols(const KernelEntry& e) { return e.sfa_box_rows; }

// D [rows, n] row-major, written by the epilogue's TMA stores in the boxes of its registry entry.
bool encode_output_map(CUtensorMap* map, void* base, OutDtype out, long long rows, int n, const KernelEntry& e) {
  const int out_bytes = out == OutDtype::kBF16 ? 2 : 4;
  TensorMap2D d;
  d.base = base;
  d.dtype = out == OutDtype::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  d.rows = static_cast<uint64_t>(rows);
  d.cols = static_cast<uint64_t>(n);
  d.row_pitch_bytes = static_cast<uint64_t>(n) * out_bytes;
  d.box_rows = static_cast<uint32_t>(e.d_box_rows);
  d.box_cols = static_cast<uint32_t>(e.d_box_cols);
  d.swizzle = swizzle_for_bytes(e.d_swizzle_bytes);
  d.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  return encode_tensor_map_2d(map, d);
}

// B's scale operand of the kernels with KernelEntry::scale_ops: [k-blocks][n][16 bytes] as 8-byte
// elements (TMA boxes hold at most 256 elements), boxes of block_n columns x one k-block.
bool encode_scale_ops_map(CUtensorMap* map, const void* base, int num_k_blocks, int n, int block_n) {
  TensorMap2D d;
  d.base = base;
  d.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT64;
  d.rows = static_cast<uint64_t>(num_k_blocks);
  d.cols = static_cast<uint64_t>(n) * 2;
  d.row_pitch_bytes = static_cast<uint64_t>(n) * 16;
  d.box_rows = 1;
  d.box_cols = static_cast<uint32_t>(block_n) * 2;
  return encode_tensor_map_2d(map, d);
}

// The tensor maps every kernel takes. sfb: per-row B scales, read by the wgrad kernels only (the
// others get zeros).
struct TensorMaps {
  CUtensorMap a, b, sfa, d;
  CUtensorMap sfb = {};
};

GemmKernelArgs make_kernel_args(const float* sfb, int n, int num_k_blocks, int num_stages,
                                int sfb_staged_floats = 0) {
  GemmKernelArgs args;
#ifdef FP8GEMM_EXPERIMENT_TIMELINE
  args.timeline = experiment_timeline_buffer();
#endif
  args.sfb_staged_floats = sfb_staged_floats;
  args.sfb = sfb;
  args.n = n;
  args.num_k_blocks = num_k_blocks;
  args.num_stages = num_stages;
  return args;
}

// Launches kernel `e` on `grid` CTAs with the setup's dynamic shared memory. `attr`: one optional
// launch attribute (cluster dimension, programmatic dependent launch), or null.
template <class SchedParams, class EpiParams>
cudaError_t launch_kernel(const KernelEntry& e, int grid, const LaunchSetup& s, TensorMaps& maps, GemmKernelArgs args,
                          SchedParams sched, EpiParams epi, cudaLaunchAttribute* attr, cudaStream_t stream) {
  void* kernel_args[] = {&maps.a, &maps.b, &maps.sfa, &maps.d, &args, &sched, &epi, &maps.sfb};
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(static_cast<unsigned>(grid), 1, 1);
  lc.blockDim = dim3(static_cast<unsigned>(e.num_threads), 1, 1);
  lc.dynamicSmemBytes = static_cast<size_t>(s.smem_bytes);
  lc.stream = stream;
  if (attr != nullptr) {
    lc.attrs = attr;
    lc.numAttrs = 1;
  }
  return cudaLaunchKernelExC(&lc, e.fn, kernel_args);
}

}  // namespace

// 256-row forward tiles serve bf16 output only. Their f32 kernels exist (with the epilogue staging
// one 128-row wave at a time they get 3 stages, as the f32 256-row wgrad tile does) but have not
// been measured against 128-row f32 tiles, so they are not offered.
bool offered(const GemmConfig& cfg, OutDtype out) { return !(cfg.block_m == 256 && out == OutDtype::kF32); }

namespace {
// Clusters: none (multicast 1, multicast_a 0) or pairs (multicast 2) sharing B (0) or A (1); or
// split-K (k_splits 2 .. kMaxKSplits, is_split_k_tile, no multicast).
bool valid_cluster(const GemmConfig& cfg) {
  if (cfg.k_splits != 1)
    return cfg.k_splits >= 2 && cfg.k_splits <= kMaxKSplits && is_split_k_tile(cfg.block_m, cfg.block_n) &&
           cfg.multicast == 1 && cfg.multicast_a == 0;
  return (cfg.multicast == 1 && cfg.multicast_a == 0) ||
         (cfg.multicast == 2 && (cfg.multicast_a == 0 || cfg.multicast_a == 1));
}
}  // namespace

bool is_compiled(const GemmConfig& cfg, OutDtype out) {
  if (is_gemv(cfg) || is_gemv_mma(cfg))
    return cfg.num_stages == 0 && cfg.num_sms == 0 && cfg.multicast == 1 && cfg.multicast_a == 0 && cfg.k_splits == 1;
  if (!offered(cfg, out) || !valid_cluster(cfg)) return false;
  if (cfg.num_stages < 0 || cfg.num_sms < 0) return false;
  return find_entry(cfg.block_m, cfg.block_n, out) >= 0;
}

int max_stages(int block_m, int block_n, OutDtype out) {
  const int idx = find_entry(block_m, block_n, out);
  if (idx < 0) return 0;
  return std::max(0, stages_that_fit(registry()[idx], kSmemPerBlockSm90));
}

int max_active_split_k_clusters(int block_m, int block_n, int cluster_size) {
  const int idx = find_entry(block_m, block_n, OutDtype::kBF16);
  if (idx < 0 || !is_split_k_tile(block_m, block_n) || cluster_size < 1 || cluster_size > kMaxKSplits) return 0;
  const KernelEntry& e = registry()[idx];
  LaunchSetup s;
  int clusters = 0;
  if (setup_launch(e, GemmConfig{block_m, block_n, 0, 0, 1}, /*min_stages=*/1, &s) != cudaSuccess ||
      ensure_smem_attribute(g_smem_attribute_set[idx][s.dev], e.fn, s.smem_limit) != cudaSuccess ||
      max_active_clusters(e, s.dev, s.smem_bytes, cluster_size, &clusters) != cudaSuccess)
    return 0;
  return clusters;
}

cudaError_t launch_fp8_gemm(const GemmProblem& p, const GemmConfig& cfg, cudaStream_t stream) {
  if (!is_compiled(cfg, p.out_dtype)) return cudaErrorInvalidValue;
  if (is_gemv(cfg)) return launch_fp8_gemv(p, stream);
  if (is_gemv_mma(cfg)) return launch_fp8_gemv_mma(p, stream);
  if (p.m < 0 || p.n < 0 || p.k <= 0) return cudaErrorInvalidValue;
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  const int out_bytes = p.out_dtype == OutDtype::kBF16 ? 2 : 4;
  // TMA: global row pitches must be multiples of 16 bytes, base addresses 16-byte aligned.
  if (p.k % 16 != 0 || (static_cast<long long>(p.n) * out_bytes) % 16 != 0) return cudaErrorInvalidValue;
  if (p.sfa_ld < p.m) return cudaErrorInvalidValue;
  if (!p.a || !p.b || !p.sfa || !p.sfb || !p.d) return cudaErrorInvalidValue;
  if (!aligned(p.a, 16) || !aligned(p.b, 16) || !aligned(p.sfa, 16) || !aligned(p.d, 16) || !aligned(p.sfb, 4))
    return cudaErrorInvalidValue;

  const int num_k_blocks = (p.k + kBlockK - 1) / kBlockK;
  const long long num_m_blocks = (p.m + cfg.block_m - 1) / cfg.block_m;
  const long long num_n_blocks = (p.n + cfg.block_n - 1) / cfg.block_n;
  const long long num_tiles = num_m_blocks * num_n_blocks;
  if (num_tiles > INT_MAX / 2) return cudaErrorInvalidValue;
  const int entry_idx = find_entry(cfg.block_m, cfg.block_n, p.out_dtype, num_k_blocks, waves_of(num_tiles, cfg));
  const KernelEntry& e = registry()[entry_idx];
  const int sfb_staged_floats = sfb_staged_floats_of(e, num_k_blocks);
  const int k_splits = cfg.k_splits;
  LaunchSetup s;
  cudaError_t err = setup_launch(e, cfg, /*min_stages=*/1, &s,
                                 sfb_staging_bytes(sfb_staged_floats) + split_k::smem_bytes(e.block_m, e.block_n, k_splits) +
                                     tile_ring_bytes(e));
  if (err != cudaSuccess) return err;
  err = ensure_smem_attribute(g_smem_attribute_set[entry_idx][s.dev], e.fn, s.smem_limit);
  if (err != cudaSuccess) return err;

  // Split-K: one tile per cluster of k_splits CTAs (the reduction uses its buffer once); tiles x
  // k_splits should not exceed the clusters that fit at once (gemm_config.pick), or the rest wait.
  if (num_tiles * k_splits > INT_MAX) return cudaErrorInvalidValue;
  int grid = static_cast<int>(num_tiles * k_splits);
  if (k_splits == 1) {
    err = persistent_grid(e, cfg, s, num_tiles, &grid);
    if (err != cudaSuccess) return err;
  }

  TensorMaps maps;
  // M below the tile (decode): load only the rows that exist, rounded up to the 8-row swizzle atom
  // (RESULTS.md: session 11, +13% to +31% at M = 1; session 21, once the rows below the box were no
  // longer zeroed per launch, -8% to -13% in time at M = 24-32 and no change at M = 40-48).
  const int a_box_rows = p.m < e.block_m ? (p.m + 7) / 8 * 8 : e.block_m;
  // A's scales with a row pitch TMA cannot take (sfa_ld % 4 != 0: 16-byte strides) are viewed as
  // one row of num_k_blocks * sfa_ld floats (GemmKernelArgs::sfa_flat_ld), so that callers need
  // not pad them (a separate XLA kernel of ~1.2 us at M = 1). The decode (64-row) tiles only; their
  // boxes take 4 floats more (their start is rounded down to 16 bytes), which the SFA slot has.
  const bool flat_sfa = p.sfa_ld % 4 != 0;
  const long long sfa_floats = static_cast<long long>(num_k_blocks) * p.sfa_ld;
  const int sfa_box = flat_sfa ? a_box_rows + 4 : a_box_rows;
  if (flat_sfa && (e.block_m != 64 || sfa_floats > INT_MAX - 3 || sfa_box > e.sfa_box_rows)) return cudaErrorInvalidValue;
  if (!encode_operand_map(&maps.a, p.a, p.m, p.k, a_box_rows) ||
      !encode_operand_map(&maps.b, p.b, p.n, p.k, e.block_n) ||
      !(flat_sfa ? encode_scale_map(&maps.sfa, p.sfa, 1, sfa_floats, static_cast<int>((sfa_floats + 3) / 4 * 4), sfa_box)
                 : encode_scale_map(&maps.sfa, p.sfa, num_k_blocks, p.m, p.sfa_ld, a_box_rows)) ||
      !encode_output_map(&maps.d, p.d, p.out_dtype, p.m, p.n, e))
    return cudaErrorInvalidValue;

  DenseSchedulerParams sched;
  sched.m = p.m;
  sched.n = p.n;
  sched.k_splits = k_splits;
  sched.num_k_blocks = num_k_blocks;
  set_tile_order(&sched, e, cfg, grid);
  cudaLaunchAttribute cluster_attr = cluster_attribute(k_splits > 1 ? k_splits : 2);
  GemmKernelArgs args = make_kernel_args(p.sfb, p.n, num_k_blocks, s.num_stages, sfb_staged_floats);
  args.a_box_rows = a_box_rows;
  args.sfa_box_rows = sfa_box;  // the A box's rows (+4 in a flat view): dense tiles start at multiples of BLOCK_M
  args.sfa_flat_ld = flat_sfa ? p.sfa_ld : 0;
  args.k_splits = k_splits;
  args.d = p.d;
  args.ld_d = p.n;
  return launch_kernel(e, grid, s, maps, args, sched, EmptyEpilogueParams{},
                       (cfg.multicast == 2 || k_splits > 1) ? &cluster_attr : nullptr, stream);
}

bool is_compiled_grouped(const GemmConfig& cfg, OutDtype out) {
  if (!offered(cfg, out)) return false;
  if (cfg.multicast != 1 || cfg.multicast_a != 0 || cfg.k_splits != 1) return false;
  if (cfg.num_stages < 0 || cfg.num_sms < 0) return false;
  return find_grouped_entry(cfg.block_m, cfg.block_n, out) >= 0;
}

// Grouped GEMM: the persistent kernel with the GroupedScheduler, which derives the tile list from
// the device-side group sizes (the producer's idle warps zero the rows no tile writes). The host
// knows only an upper bound of the number of tiles (to cap the grid): per group at most one
// partial M-tile more than its rows need.
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
      !aligned(p.group_sizes, 4) || !aligned(p.tile_counter, 4))
    return cudaErrorInvalidValue;

  const int entry_idx = find_grouped_entry(cfg.block_m, cfg.block_n, p.out_dtype);
  const KernelEntry& e = grouped_registry()[entry_idx];
  const int num_k_blocks = (p.k + kBlockK - 1) / kBlockK;
  const long long num_sfb_rows = (p.n + 127) / 128;
  const long long sfb_group_stride = num_sfb_rows * num_k_blocks;
  if (sfb_group_stride * p.num_groups > INT_MAX) return cudaErrorInvalidValue;

  const int sfb_staged_floats = sfb_staged_floats_of(e, num_k_blocks);
  LaunchSetup s;
  cudaError_t err =
      setup_launch(e, cfg, /*min_stages=*/1, &s, sfb_staging_bytes(sfb_staged_floats) + tile_ring_bytes(e));
  if (err != cudaSuccess) return err;

  // Upper bound of the tiles: contiguous sum_g cdiv(rows_g, BM) <= cdiv(M, BM) + (non-empty groups).
  const long long num_n_blocks = (p.n + e.block_n - 1) / e.block_n;
  const long long max_m_tiles =
      p.masked ? static_cast<long long>(p.num_groups) * ((p.m + e.block_m - 1) / e.block_m)
               : (p.m + e.block_m - 1) / e.block_m + std::min<long long>(p.num_groups, p.m);
  const long long max_tiles = max_m_tiles * num_n_blocks;
  if (max_tiles > INT_MAX / 2) return cudaErrorInvalidValue;

  // No group: no tile, D is all zero (contiguous; masked with G = 0 has no rows).
  const long long row_bytes = static_cast<long long>(p.n) * out_bytes;
  if (p.num_groups == 0) return cudaMemsetAsync(p.d, 0, static_cast<size_t>(total_rows * row_bytes), stream);

  err = ensure_smem_attribute(g_grouped_smem_attribute_set[entry_idx][s.dev], e.fn, s.smem_limit);
  if (err != cudaSuccess) return err;
  int grid = 0;
  err = persistent_grid(e, cfg, s, max_tiles, &grid);
  if (err != cudaSuccess) return err;

  TensorMaps maps;
  // All groups' B as one [G * N, K] tensor: a ragged last N-tile of group g reads rows of group
  // g + 1 (or zeros past the end) into columns >= N, which are never stored.
  if (!encode_operand_map(&maps.a, p.a, total_rows, p.k, e.a_load_rows) ||
      !encode_operand_map(&maps.b, p.b, static_cast<long long>(p.num_groups) * p.n, p.k, e.block_n) ||
      !encode_scale_map(&maps.sfa, p.sfa, num_k_blocks, total_rows, p.sfa_ld, sfa_box_cols(e)) ||
      !encode_output_map(&maps.d, p.d, p.out_dtype, total_rows, p.n, e))
    return cudaErrorInvalidValue;

  // The contiguous layout's 256-row tile takes its tiles in the run-time order when a counter is
  // given: the partial last tiles of its unpadded groups run one wave, at about half the cost of a
  // tile, which lets the static order drift apart (half speed at 256 groups). The other tiles cost
  // the same whatever their rows, and the 128- and 64-row tiles measured 5-27% slower in the
  // run-time order than in the static one (as did the masked layout's short-K shapes, 3-6%), so
  // they keep it (RESULTS.md, session 17). FP8GEMM_RUN_TIME_ORDER=0: the static order for all.
  GroupedSchedulerParams sched;
  sched.tile_counter = run_time_order_default() && !p.masked && e.block_m == 256 ? p.tile_counter : nullptr;
  if (sched.tile_counter != nullptr) {
    err = cudaMemsetAsync(sched.tile_counter, 0, sizeof(int), stream);
    if (err != cudaSuccess) return err;
  }
  sched.sizes = p.group_sizes;
  sched.num_groups = p.num_groups;
  sched.m = p.m;
  sched.n = p.n;
  set_tile_order(&sched, e, cfg, grid);
  sched.masked = p.masked ? 1 : 0;
  sched.sfb_group_stride = static_cast<int>(sfb_group_stride);
  // A group's last M-block of <= 128 rows as wide tiles (128 rows x two N-blocks) rather than one
  // one-wave tile per N-block (256-row tiles, whose partial tiles run one wave).
  sched.wide_partial = e.block_m == 256 && skip_empty_waves_default() && wide_partial_default() ? 1 : 0;
  RowMaskEpilogueParams epi;
  epi.d = p.d;
  epi.ld = p.n;

  return launch_kernel(e, grid, s, maps,
                       make_kernel_args(p.sfb, p.n, num_k_blocks, s.num_stages, sfb_staged_floats), sched, epi,
                       /*attr=*/nullptr, stream);
}

// ------------------------------------------------------------------------------------------------
// Weight-gradient GEMMs (per-row B scales, f32 or bf16 output): dense and k-grouped.
// ------------------------------------------------------------------------------------------------

bool is_compiled_wgrad(const GemmConfig& cfg, bool k_grouped) {
  if (!valid_cluster(cfg) || cfg.k_splits != 1 || (k_grouped && cfg.multicast == 2 && cfg.multicast_a != 1))
    return false;
  if (cfg.num_stages < 0 || cfg.num_sms < 0) return false;
  return find_wgrad_entry(cfg.block_m, cfg.block_n, false, OutDtype::kF32) >= 0;
}

int max_stages_wgrad(int block_m, int block_n, OutDtype out) {
  const int idx = find_wgrad_entry(block_m, block_n, false, out);
  if (idx < 0) return 0;
  return std::max(0, stages_that_fit(wgrad_registry(false)[idx], kSmemPerBlockSm90));
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
  void* d;
  int m, n, t;
  OutDtype out;
  const void* sfa_ops = nullptr;  // kernels with KernelEntry::scale_ops (256x96)
  const void* sfb_ops = nullptr;
};

// `e`: the kernel; one with KernelEntry::scale_ops needs both scale operands.
bool wgrad_operands_ok(const WgradOperands& p, const KernelEntry& e) {
  if (e.scale_ops && (!p.sfa_ops || !p.sfb_ops || !aligned(p.sfa_ops, 16) || !aligned(p.sfb_ops, 16))) return false;
  if (p.out != OutDtype::kF32 && p.out != OutDtype::kBF16) return false;
  const int out_bytes = p.out == OutDtype::kBF16 ? 2 : 4;
  if (p.t % 16 != 0 || (p.n * out_bytes) % 16 != 0) return false;  // TMA row pitches: 16-byte multiples
  if (p.sfa_ld < p.m || p.sfa_ld % 4 != 0 || p.sfb_ld < p.n || p.sfb_ld % 4 != 0) return false;
  if (!p.a || !p.b || !p.sfa || !p.sfb || !p.d) return false;
  return aligned(p.a, 16) && aligned(p.b, 16) && aligned(p.sfa, 16) && aligned(p.sfb, 16) && aligned(p.d, 16);
}

template <class SchedParams, class EpiParams>
cudaError_t launch_wgrad_kernel(const WgradOperands& p, long long rows_d, long long max_tiles, bool k_grouped,
                                int entry_idx, const GemmConfig& cfg, SchedParams sched, const EpiParams& epi,
                                cudaStream_t stream) {
  const KernelEntry& e = wgrad_registry(k_grouped)[entry_idx];
  LaunchSetup s;
  // >= 2 stages: the deferred-promotion loop waits for stage kb+1 while it still holds kb.
  cudaError_t err = setup_launch(e, cfg, /*min_stages=*/2, &s, tile_ring_bytes(e));
  if (err != cudaSuccess) return err;
  err = ensure_smem_attribute(g_wgrad_smem_attribute_set[k_grouped][entry_idx][s.dev], e.fn, s.smem_limit);
  if (err != cudaSuccess) return err;
  int grid = 0;
  err = persistent_grid(e, cfg, s, max_tiles, &grid);
  if (err != cudaSuccess) return err;

  const int num_k_blocks = (p.t + kBlockK - 1) / kBlockK;
  TensorMaps maps;
  if (!encode_operand_map(&maps.a, p.a, p.m, p.t, e.a_load_rows) ||
      !encode_operand_map(&maps.b, p.b, p.n, p.t, e.block_n) ||
      // A's scale operand: 32-bit words in the scales' layout, loaded as they are.
      !encode_scale_map(&maps.sfa, e.scale_ops ? static_cast<const float*>(p.sfa_ops) : p.sfa, num_k_blocks, p.m,
                        p.sfa_ld, sfa_box_cols(e)) ||
      !(e.scale_ops ? encode_scale_ops_map(&maps.sfb, p.sfb_ops, num_k_blocks, p.n, e.block_n)
                    : encode_scale_map(&maps.sfb, p.sfb, num_k_blocks, p.n, p.sfb_ld, e.block_n)) ||  // kSfbBoxCols
      !encode_output_map(&maps.d, p.d, p.out, rows_d, p.n, e))
    return cudaErrorInvalidValue;

  set_tile_order(&sched, e, cfg, grid);
  cudaLaunchAttribute cluster_attr = cluster_attribute(2);
  // Per-row B scales come through maps.sfb, not GemmKernelArgs::sfb.
  return launch_kernel(e, grid, s, maps, make_kernel_args(nullptr, p.n, num_k_blocks, s.num_stages), sched, epi,
                       cfg.multicast == 2 ? &cluster_attr : nullptr, stream);
}

}  // namespace

cudaError_t launch_fp8_gemm_wgrad(const WgradGemmProblem& p, const GemmConfig& cfg, cudaStream_t stream) {
  if (!is_compiled_wgrad(cfg, /*k_grouped=*/false)) return cudaErrorInvalidValue;
  if (p.m < 0 || p.n < 0 || p.t <= 0) return cudaErrorInvalidValue;
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  const WgradOperands ops{p.a, p.b, p.sfa, p.sfa_ld, p.sfb, p.sfb_ld, p.d,
                          p.m, p.n, p.t, p.out_dtype, p.sfa_ops, p.sfb_ops};
  const int entry_idx = find_wgrad_entry(cfg.block_m, cfg.block_n, /*k_grouped=*/false, p.out_dtype);
  const KernelEntry& e = wgrad_registry(false)[entry_idx];
  if (!wgrad_operands_ok(ops, e)) return cudaErrorInvalidValue;
  const long long num_tiles =
      static_cast<long long>((p.m + e.block_m - 1) / e.block_m) * ((p.n + e.block_n - 1) / e.block_n);
  if (num_tiles > INT_MAX / 2) return cudaErrorInvalidValue;
  DenseSchedulerParams sched;
  sched.m = p.m;
  sched.n = p.n;  // the tile order is set by launch_wgrad_kernel from the grid
  sched.num_k_blocks = (p.t + kBlockK - 1) / kBlockK;
  return launch_wgrad_kernel(ops, p.m, num_tiles, /*k_grouped=*/false, entry_idx, cfg, sched,
                             EmptyEpilogueParams{}, stream);
}

cudaError_t launch_fp8_grouped_gemm_wgrad(const GroupedWgradGemmProblem& p, const GemmConfig& cfg,
                                          cudaStream_t stream) {
  if (!is_compiled_wgrad(cfg, /*k_grouped=*/true)) return cudaErrorInvalidValue;
  if (p.m < 0 || p.n < 0 || p.t <= 0 || p.num_groups < 0) return cudaErrorInvalidValue;
  if (p.m == 0 || p.n == 0 || p.num_groups == 0) return cudaSuccess;  // D is empty
  const WgradOperands ops{p.a, p.b, p.sfa, p.sfa_ld, p.sfb, p.sfb_ld, p.d,
                          p.m, p.n, p.t, p.out_dtype, p.sfa_ops, p.sfb_ops};
  const int entry_idx = find_wgrad_entry(cfg.block_m, cfg.block_n, /*k_grouped=*/true, p.out_dtype);
  const KernelEntry& e = wgrad_registry(true)[entry_idx];
  if (!wgrad_operands_ok(ops, e) || !p.group_sizes || !aligned(p.group_sizes, 4)) return cudaErrorInvalidValue;
  // D rows (G * M, plus a tile) and the tile indices are int32 in the kernel.
  const long long rows_d = static_cast<long long>(p.num_groups) * p.m;
  const long long num_tiles = static_cast<long long>(p.num_groups) * ((p.m + e.block_m - 1) / e.block_m) *
                              ((p.n + e.block_n - 1) / e.block_n);
  if (rows_d > INT_MAX - 256 || num_tiles > INT_MAX / 2) return cudaErrorInvalidValue;
  // Pairs share A on neighbouring N-blocks of one group: every group needs an even number of them.
  if (cfg.multicast == 2 && ((p.n + e.block_n - 1) / e.block_n) % 2 != 0) return cudaErrorInvalidValue;
  KGroupedWgradSchedulerParams sched;
  sched.sizes = p.group_sizes;
  sched.num_groups = p.num_groups;
  sched.m = p.m;
  sched.n = p.n;
  sched.t = p.t;  // the tile order is set by launch_wgrad_kernel from the grid
  RowMaskEpilogueParams epi;
  epi.d = p.d;
  epi.ld = p.n;
  return launch_wgrad_kernel(ops, rows_d, num_tiles, /*k_grouped=*/true, entry_idx, cfg, sched, epi, stream);
}

}  // namespace fp8gemm
