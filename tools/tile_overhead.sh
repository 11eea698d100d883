#!/usr/bin/env bash
# Where the dense 256x128 kernel's time goes (RESULTS.md, sessions 17-18): the harness on shapes of
# few and many k-blocks, (1) as built, (2) -DFP8GEMM_EXPERIMENT_NO_TMA_STORE (everything but the TMA
# store), (3) -DFP8GEMM_EXPERIMENT_LOADS_ONLY (no output, so the compiler drops the math too: the
# TMA loads and stage barriers alone, the data-movement floor), each without clusters and in CTA
# pairs sharing A (the picker's choice for long K; RESULTS.md, session 19: sharing A lowers the
# loads-only floor by 24%).
# Alternated twice; logs to $OUT/tile_overhead.log. Run on a lent Hopper machine (~3 min).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/tile_overhead_out}
mkdir -p "$OUT"
log="$OUT/tile_overhead.log"
NVCC=(nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 --expt-relaxed-constexpr -Icuda)
build() {  # $1: output binary, $2...: extra nvcc flags
  local bin=$1; shift
  local dir=/tmp/objs_$(basename "$bin") objs=()
  mkdir -p "$dir"
  for f in cuda/gemm/*.cu; do
    o=$dir/$(basename "$f" .cu).o; objs+=("$o")
    "${NVCC[@]}" "$@" -c "$f" -o "$o" &
  done
  wait
  "${NVCC[@]}" "$@" tools/gemm_standalone_test.cu "${objs[@]}" -o "$bin"
}
build /tmp/gemm_as_built || exit 1
build /tmp/gemm_no_tma_store -DFP8GEMM_EXPERIMENT_NO_TMA_STORE || exit 1
build /tmp/gemm_loads_only -DFP8GEMM_EXPERIMENT_LOADS_ONLY || exit 1
: > "$log"
for round in 1 2; do
  for shape in 4096x32768x512 4096x7168x2048 4096x4096x7168 4096x7168x16384; do
    echo "== round $round $shape" >> "$log"
    for mc in 1 2A; do
      args=(--bench-only --normal --tile=256x128 --multicast=$mc --shape=$shape --runs=20)
      { echo -n "as built     mc$mc: "; /tmp/gemm_as_built "${args[@]}" | grep "^  bench" | tail -1; } >> "$log"
      { echo -n "no TMA store mc$mc: "; /tmp/gemm_no_tma_store "${args[@]}" | grep "^  bench" | tail -1; } >> "$log"
      { echo -n "loads only   mc$mc: "; /tmp/gemm_loads_only "${args[@]}" | grep "^  bench" | tail -1; } >> "$log"
    done
  done
done
cat "$log"
