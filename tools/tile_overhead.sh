#!/usr/bin/env bash
# Where the dense 256x128 kernel's time goes (RESULTS.md, sessions 17-18): the harness on shapes of
# few and many k-blocks, (1) as built, (2) -DFP8GEMM_EXPERIMENT_NO_TMA_STORE (everything but the TMA
# store), (3) -DFP8GEMM_EXPERIMENT_LOADS_ONLY (no output, so the compiler drops the math too: the
# TMA loads and stage barriers alone, the data-movement floor), (4) -DFP8GEMM_EXPERIMENT_ATOM_STAGING
# (the epilogue staged one 8 KB atom per warpgroup at a time: 4 pipeline stages instead of 3; its
# results are checked first with the harness's --quick list).
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
build /tmp/gemm_atom_staging -DFP8GEMM_EXPERIMENT_ATOM_STAGING || exit 1
: > "$log"
{ echo -n "atom staging checks: "; /tmp/gemm_atom_staging --quick --no-bench --tile=256x128 | tail -1; } >> "$log"
for round in 1 2; do
  for shape in 4096x32768x512 4096x7168x2048 4096x4096x7168 4096x7168x16384; do
    args=(--bench-only --normal --tile=256x128 --multicast=1 --shape=$shape --runs=20)
    echo "== round $round $shape" >> "$log"
    { echo -n "as built:        "; /tmp/gemm_as_built "${args[@]}" | grep "^  bench" | tail -1; } >> "$log"
    { echo -n "no TMA store:    "; /tmp/gemm_no_tma_store "${args[@]}" | grep "^  bench" | tail -1; } >> "$log"
    { echo -n "loads only:      "; /tmp/gemm_loads_only "${args[@]}" | grep "^  bench" | tail -1; } >> "$log"
    { echo -n "atom staging:    "; /tmp/gemm_atom_staging "${args[@]}" | grep "^  bench" | tail -1; } >> "$log"
  done
done
cat "$log"
