#!/usr/bin/env bash
# Per-tile timeline of the GEMM kernel (cuda/gemm/timeline.cuh): builds a harness with
# -DFP8GEMM_EXPERIMENT_TIMELINE and, for each shape, prints its timing and where a tile's time
# goes (B-scale staging, waiting for data, the k-loop, the epilogue's two stores; the producer's
# waits). Run on a lent Hopper machine from the repo root; logs to $OUT/timeline.log.
#   tools/timeline.sh [MxNxK ...]   (default: the M = 4096 shapes of SPEC's dense table)
#   HARNESS=grouped tools/timeline.sh [CASE ...]   the grouped harness's timed cases whose names
#                                   contain CASE, e.g. "4x8192 N7168 K2048 even" (default: all)
#   HARNESS=wgrad tools/timeline.sh [GxMEANxMxN ...]  the k-grouped weight gradient, even / MoE-like /
#                                   padded sizes (bf16 out; default 128x256x7168x2048)
# Environment: TILE (default 256x128; a space-separated list runs each, one build), MULTICAST
# (dense: default "1 2A"; wgrad: one of 2A / 2B, default 2A), NVCC_FLAGS (e.g. a what-if's -DFP8GEMM_EXPERIMENT_...); FP8GEMM_TIMELINE_WARM=1 records a
# launch that follows an unrecorded one (operands in L2, not the flush's dirty lines: decode shapes,
# whose CTAs run one tile each, get a summary of that tile from kernel entry to exit);
# FP8GEMM_TIMELINE_DUMP=prefix also writes each recorded launch's raw stamps to prefix<n>.bin (the
# layout of cuda/gemm/timeline.cuh, for an analysis tile by tile over time).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/timeline_out}
mkdir -p "$OUT"
log="$OUT/timeline.log"
shapes=("$@")
grouped=0 wgrad=0
[[ ${HARNESS:-dense} == grouped ]] && grouped=1
[[ ${HARNESS:-dense} == wgrad ]] && wgrad=1
if [[ ${#shapes[@]} -eq 0 ]]; then
  if ((grouped)); then shapes=("contig"); elif ((wgrad)); then shapes=(128x256x7168x2048); else shapes=(4096x32768x512 4096x24576x1536 4096x7168x2048 4096x4096x7168 4096x7168x16384); fi
fi
NVCC=(nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 --expt-relaxed-constexpr -Icuda -Itools
      -DFP8GEMM_EXPERIMENT_TIMELINE ${NVCC_FLAGS:-})
dir=/tmp/objs_timeline bin=/tmp/gemm_timeline objs=()
mkdir -p "$dir"
for f in cuda/gemm/*.cu; do
  o=$dir/$(basename "$f" .cu).o; objs+=("$o")
  "${NVCC[@]}" -Xptxas=-v -c "$f" -o "$o" 2> "${o%.o}.ptxas" &
done
wait
# The marks cost registers: a kernel at its limit may spill only in this build, and then its timings
# are not those of the real kernel (session 38: the grouped 256x128 tile, ~12% slower).
spills=$(grep -H "[1-9][0-9]* bytes spill stores" "$dir"/*.ptxas | sed "s|$dir/||")
[[ -n $spills ]] && printf 'WARNING: the instrumented build spills (its timings are not the kernel'"'"'s):\n%s\n' "$spills"
grep -H "error" "$dir"/*.ptxas  # compile errors, if any (the link below then fails)
harness=tools/gemm_standalone_test.cu
((grouped)) && harness=tools/grouped_standalone_test.cu
((wgrad)) && harness=tools/wgrad_standalone_test.cu
"${NVCC[@]}" "$harness" "${objs[@]}" -o "$bin" || exit 1
: > "$log"
for tile in ${TILE:-256x128}; do
  for shape in "${shapes[@]}"; do
    if ((grouped)); then
      "$bin" --bench-only --tiles="$tile" --case="$shape" --runs=20 | grep -E "^  (bench|timeline|  )" >> "$log"
      continue
    fi
    if ((wgrad)); then
      "$bin" --bench-only --out=bf16 --tile="$tile" --multicast="${MULTICAST:-2A}" --moe="$shape" --runs=20 \
        | grep -E "^  (bench|timeline|  )" >> "$log"
      continue
    fi
    for mc in ${MULTICAST:-1 2A}; do
      "$bin" --bench-only --normal --tile="$tile" --multicast="$mc" --shape="$shape" --runs=20 \
        | grep -E "^  (bench|timeline|  )" >> "$log"
    done
  done
done
cat "$log"
