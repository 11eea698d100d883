// Harness-only: prints where a GEMM kernel's tiles spend their time, from the per-tile timeline
// that a -DFP8GEMM_EXPERIMENT_TIMELINE build records (cuda/gemm/timeline.cuh). Averages over all
// CTAs and over each CTA's tiles except its first and last (start-up and drain), in ns.
#pragma once
#ifdef FP8GEMM_EXPERIMENT_TIMELINE

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"
#include "gemm/timeline.cuh"

namespace fp8gemm {
unsigned long long* experiment_timeline_buffer();  // cuda/gemm/fp8_gemm.cu (timeline builds)
}

// Runs `launch` once (after clearing the buffer) and prints the summary.
template <class Launch>
void print_timeline(const char* label, const Launch& launch) {
  namespace tl = fp8gemm::timeline;
  unsigned long long* dbuf = fp8gemm::experiment_timeline_buffer();
  const size_t count = static_cast<size_t>(tl::kPerCta) * tl::kMaxCtas;
  // FP8GEMM_TIMELINE_WARM=1: one untimed launch first (the operands in L2, not a dirty flushed L2).
  if (std::getenv("FP8GEMM_TIMELINE_WARM") != nullptr) {
    CUDA_CHECK(launch());
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  CUDA_CHECK(cudaMemset(dbuf, 0, count * sizeof(unsigned long long)));
  CUDA_CHECK(launch());
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned long long> h(count);
  CUDA_CHECK(cudaMemcpy(h.data(), dbuf, count * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  // FP8GEMM_TIMELINE_DUMP=prefix: the raw stamps also go to prefix<n>.bin, n counting the calls, for
  // an analysis over time (per CTA: tile by tile; the header maps its SM clock to the global timer).
  if (const char* prefix = std::getenv("FP8GEMM_TIMELINE_DUMP")) {
    static int dumps = 0;
    char path[512];
    std::snprintf(path, sizeof(path), "%s%d.bin", prefix, dumps++);
    if (FILE* f = std::fopen(path, "wb")) {
      std::fwrite(h.data(), sizeof(unsigned long long), count, f);
      std::fclose(f);
      std::printf("  timeline %s: raw stamps in %s\n", label, path);
    }
  }

  // Sums of per-tile intervals (ns) per role; names of the intervals between events.
  constexpr int kMathIntervals = 8, kProdIntervals = 3;
  const char* math_names[kMathIntervals] = {"B scales", "wait data", "k-loop", "next tile", "store 1",
                                            "store 2",  "to next",   "whole tile"};
  const char* prod_names[kProdIntervals] = {"wait stage", "issue k-blocks", "to next"};
  double math_sum[2][kMathIntervals] = {}, prod_sum[kProdIntervals] = {}, cross_sum[4] = {};
  long long cross_n = 0, cross2_n = 0;
  long long math_n[2] = {}, prod_n = 0;
  double first_data[2] = {};
  long long first_n[2] = {};
  unsigned long long t0 = ~0ull, t_end = 0, start_max = 0;
  double span_sum = 0, ghz_sum = 0;
  int ctas = 0, tiles_max = 0;
  for (int c = 0; c < tl::kMaxCtas; ++c) {
    const unsigned long long* row = h.data() + static_cast<size_t>(c) * tl::kPerCta;
    if (row[0] == 0 || row[1] == 0) continue;
    const double ghz = static_cast<double>(row[3] - row[2]) / static_cast<double>(row[1] - row[0]);
    ++ctas, ghz_sum += ghz, span_sum += static_cast<double>(row[1] - row[0]);
    t0 = std::min(t0, row[0]), t_end = std::max(t_end, row[1]), start_max = std::max(start_max, row[0]);
    auto ev = [&](int role, int tile, int e) { return row[tl::kHeader + (role * tl::kMaxTiles + tile) * tl::kEvents + e]; };
    auto ns = [&](unsigned long long a, unsigned long long b) { return static_cast<double>(b - a) / ghz; };
    for (int role = 0; role < 2; ++role) {
      int n = 0;
      while (n < tl::kMaxTiles && ev(role, n, 0) != 0) ++n;
      tiles_max = std::max(tiles_max, n);
      if (n > 0 && ev(role, 0, 2) != 0) first_data[role] += ns(ev(role, 0, 0), ev(role, 0, 2)), ++first_n[role];
      for (int t = 1; t + 1 < n; ++t) {
        if (ev(role, t, 2) == 0) continue;  // no event 2: not a two-wave tile
        const unsigned long long e[8] = {ev(role, t, 0), ev(role, t, 1), ev(role, t, 2), ev(role, t, 3),
                                         ev(role, t, 4), ev(role, t, 5), ev(role, t, 6), ev(role, t + 1, 0)};
        for (int i = 0; i < 7; ++i) math_sum[role][i] += ns(e[i], e[i + 1]);
        math_sum[role][7] += ns(e[0], e[7]);
        ++math_n[role];
      }
    }
    int n = 0;
    while (n < tl::kMaxTiles && ev(tl::kProducerRole, n, 0) != 0) ++n;
    for (int t = 1; t + 1 < n; ++t) {
      prod_sum[0] += ns(ev(2, t, 0), ev(2, t, 1));
      prod_sum[1] += ns(ev(2, t, 1), ev(2, t, 2));
      prod_sum[2] += ns(ev(2, t, 2), ev(2, t + 1, 0));
      ++prod_n;
      // One SM clock for all roles of a CTA: when the tile's first k-block was requested, against
      // the previous tile's k-loop end (math warpgroup 0) and the moment its data was there.
      if (ev(0, t, 2) != 0 && ev(0, t - 1, 3) != 0) {
        cross_sum[0] += static_cast<double>(static_cast<long long>(ev(0, t - 1, 3) - ev(2, t, 1))) / ghz;
        cross_sum[1] += ns(ev(2, t, 1), ev(0, t, 2));
        ++cross_n;
      }
      if (ev(0, t, 7) != 0 && ev(2, t, 3) != 0) {
        cross_sum[2] += ns(ev(2, t, 3), ev(0, t, 7));
        cross_sum[3] += static_cast<double>(static_cast<long long>(ev(2, t, 3) - ev(0, t - 1, 3))) / ghz;
        ++cross2_n;
      }
    }
  }
  if (ctas == 0) {
    std::printf("  timeline %s: nothing recorded\n", label);
    return;
  }
  std::printf("  timeline %s: %d CTAs, <= %d tiles each, SM clock %.3f GHz, CTA span %.1f us (mean), "
              "kernel %.1f us, last CTA started %.2f us after the first\n",
              label, ctas, tiles_max, ghz_sum / ctas, span_sum / ctas * 1e-3, (t_end - t0) * 1e-3,
              (start_max - t0) * 1e-3);
  // CTAs with one tile (decode shapes): where that tile's time goes, from kernel entry to exit, per
  // parity of blockIdx.x (split-K: rank 0 and rank 1 of a cluster of 2), SM clocks in ns.
  if (tiles_max == 1) {
    const char* names[7] = {"entry->tile", "entry->1st load issued", "tile->1st data", "1st data->k-loop done",
                            "k-loop done->store issued+reduced", "store->exit", "entry->exit"};
    double sum[2][7] = {};
    int n[2] = {};
    for (int c = 0; c < tl::kMaxCtas; ++c) {
      const unsigned long long* row = h.data() + static_cast<size_t>(c) * tl::kPerCta;
      auto ev = [&](int role, int e) { return row[tl::kHeader + (role * tl::kMaxTiles) * tl::kEvents + e]; };
      if (row[0] == 0 || row[1] == 0 || ev(0, 0) == 0 || ev(0, 2) == 0) continue;
      const double ghz = static_cast<double>(row[3] - row[2]) / static_cast<double>(row[1] - row[0]);
      auto ns = [&](unsigned long long a, unsigned long long b) { return static_cast<double>(static_cast<long long>(b - a)) / ghz; };
      const double v[7] = {ns(row[2], ev(0, 0)), ns(row[2], ev(tl::kProducerRole, 1)), ns(ev(0, 0), ev(0, 2)),
                           ns(ev(0, 2), ev(0, 3)), ns(ev(0, 3), ev(0, 5)), ns(ev(0, 5), row[3]), ns(row[2], row[3])};
      const int parity = c & 1;
      for (int i = 0; i < 7; ++i) sum[parity][i] += v[i];
      ++n[parity];
    }
    // The producer's prologue: entry -> barriers initialised and synced (4) -> griddepcontrol.wait (5)
    // -> setmaxnreg + scheduler constructed (6) -> first tile fetched (0) -> its first stage free (1).
    double pro[5] = {};
    int pn = 0;
    for (int c = 0; c < tl::kMaxCtas; ++c) {
      const unsigned long long* row = h.data() + static_cast<size_t>(c) * tl::kPerCta;
      auto ev = [&](int e) { return row[tl::kHeader + (tl::kProducerRole * tl::kMaxTiles) * tl::kEvents + e]; };
      if (row[0] == 0 || row[1] == 0 || ev(4) == 0 || ev(6) == 0 || ev(1) == 0) continue;
      const double ghz = static_cast<double>(row[3] - row[2]) / static_cast<double>(row[1] - row[0]);
      auto ns = [&](unsigned long long a, unsigned long long b) { return static_cast<double>(static_cast<long long>(b - a)) / ghz; };
      pro[0] += ns(row[2], ev(4)), pro[1] += ns(ev(4), ev(5)), pro[2] += ns(ev(5), ev(6)), pro[3] += ns(ev(6), ev(0));
      pro[4] += ns(ev(0), ev(1));
      ++pn;
    }
    if (pn > 0)
      std::printf("    producer prologue (ns): entry->barriers synced %.0f, griddep wait %.0f, setmaxnreg+scheduler %.0f, "
                  "first tile %.0f, first stage %.0f\n", pro[0] / pn, pro[1] / pn, pro[2] / pn, pro[3] / pn, pro[4] / pn);
    // Deferred-promotion loop (event 8: k-block 16's data there): ns per k-block before and after.
    double early = 0, late = 0;
    int en = 0;
    for (int c = 0; c < tl::kMaxCtas; ++c) {
      const unsigned long long* row = h.data() + static_cast<size_t>(c) * tl::kPerCta;
      auto ev = [&](int e) { return row[tl::kHeader + e]; };  // math warpgroup 0, tile 0
      if (row[0] == 0 || row[1] == 0 || ev(2) == 0 || ev(8) == 0 || ev(3) == 0) continue;
      const double ghz = static_cast<double>(row[3] - row[2]) / static_cast<double>(row[1] - row[0]);
      early += static_cast<double>(ev(8) - ev(2)) / ghz / 16, late += static_cast<double>(ev(3) - ev(8)) / ghz;
      ++en;
    }
    if (en > 0) std::printf("    k-loop: %.0f ns per k-block over k-blocks 0-15; k-block 16 -> done %.0f ns\n", early / en, late / en);
    // Split-K (event 7: the partials reduced, or sent): per cluster of 2 (CTAs 2i, 2i + 1), on the
    // global timer from the even CTA's entry: when each rank's k-loop ends and its reduction is done.
    double sk[4] = {}, skew = 0;  // skew: mean |k-loop done, odd - even| over the pairs
    int skn = 0;
    for (int c = 0; c + 1 < tl::kMaxCtas; c += 2) {
      const unsigned long long* r0 = h.data() + static_cast<size_t>(c) * tl::kPerCta;
      const unsigned long long* r1 = r0 + tl::kPerCta;
      auto ev = [&](const unsigned long long* row, int e) { return row[tl::kHeader + e]; };
      if (r0[0] == 0 || r1[0] == 0 || ev(r0, 7) == 0 || ev(r1, 7) == 0 || ev(r0, 3) == 0 || ev(r1, 3) == 0) continue;
      auto at = [&](const unsigned long long* row, unsigned long long clk) {
        const double ghz = static_cast<double>(row[3] - row[2]) / static_cast<double>(row[1] - row[0]);
        return static_cast<double>(static_cast<long long>(row[0] - r0[0])) +
               static_cast<double>(static_cast<long long>(clk - row[2])) / ghz;
      };
      sk[0] += at(r0, ev(r0, 3)), sk[1] += at(r1, ev(r1, 3)), sk[2] += at(r0, ev(r0, 7)), sk[3] += at(r1, ev(r1, 7));
      skew += std::abs(at(r1, ev(r1, 3)) - at(r0, ev(r0, 3)));
      ++skn;
    }
    if (skn > 0)
      std::printf("    split-K pairs (%d), ns from the even CTA's entry: k-loop done even %.0f / odd %.0f, "
                  "reduced or sent even %.0f / odd %.0f; mean |k-loop done odd - even| %.0f\n", skn, sk[0] / skn,
                  sk[1] / skn, sk[2] / skn, sk[3] / skn, skew / skn);
    for (int parity = 0; parity < 2; ++parity) {
      if (n[parity] == 0) continue;
      std::printf("    one-tile CTAs, blockIdx %s (%d):", parity ? "odd" : "even", n[parity]);
      for (int i = 0; i < 7; ++i) std::printf(" %s %.0f%s", names[i], sum[parity][i] / n[parity], i < 6 ? "," : "\n");
    }
  }
  for (int role = 0; role < 2; ++role) {
    if (math_n[role] == 0) continue;
    std::printf("    math wg%d (ns per tile, %lld tiles; first tile's data after %.0f):", role, math_n[role],
                first_n[role] ? first_data[role] / first_n[role] : 0.0);
    for (int i = 0; i < kMathIntervals; ++i) std::printf(" %s %.0f%s", math_names[i], math_sum[role][i] / math_n[role], i + 1 < kMathIntervals ? "," : "\n");
  }
  if (prod_n > 0) {
    std::printf("    producer (ns per tile):");
    for (int i = 0; i < kProdIntervals; ++i) std::printf(" %s %.0f%s", prod_names[i], prod_sum[i] / prod_n, i + 1 < kProdIntervals ? "," : "\n");
  }
  if (cross_n > 0)
    std::printf("    first k-block of a tile: requested %.0f ns before the previous tile's k-loop ended, "
                "ready for wg0 %.0f ns after the request\n", cross_sum[0] / cross_n, cross_sum[1] / cross_n);
  if (cross2_n > 0)
    std::printf("    second k-block: requested %.0f ns after the previous tile's k-loop ended, ready for wg0 %.0f ns "
                "after the request\n", cross_sum[3] / cross2_n, cross_sum[2] / cross2_n);
  std::fflush(stdout);
}

#endif  // FP8GEMM_EXPERIMENT_TIMELINE
