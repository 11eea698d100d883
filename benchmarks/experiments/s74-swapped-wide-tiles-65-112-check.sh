#!/usr/bin/env bash
# The device check of s74-swapped-wide-tiles-65-112.patch in one call, most needed first (each step
# after the first A/B runs only while END seconds have not passed):
#   the harness A/B FP8GEMM_SWAP_AB=0 / 112 at 32x256 uneven (three rounds), the harness's checks,
#   the patched tests/test_gpu.py -k "grouped or masked or exported" on the patch's wheel, one A/B round at
#   8x4096 and 256x1024, memcheck and racecheck on --small, then the grouped suite (112, then 0).
# Artifacts, built here beforehand (no GPU needed) from a worktree of 665e83c with the patch applied,
# into $D (default .perfA/s75, an ignored folder named in the run's carry):
#   $D/swap4  the grouped harness: cuda/gemm/*.cu and tools/grouped_standalone_test.cu (the latter
#             also -Itools) compiled with nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17
#             --expt-relaxed-constexpr -Icuda -c, two at a time, then linked (~8 min on 2 cores)
#   $D/whl/   the wheel: CMAKE_BUILD_PARALLEL_LEVEL=2 pip wheel . --no-deps --no-build-isolation
#             -Ccmake.define.FP8GEMM_PTXAS_VERBOSE=ON (~3 min); check its log for spills
#   $D/tests/ the patched tests/*.py
# .perfA/s77 (session 77) holds the same harness, and the wheel and tests of fd71165 with the patch
# applied (that package adds jax.export; its tests add test_exported_program_runs_the_kernels, which
# the pytest step runs too). Its wheel's ptxas report shows no spills.
# Usage (device): END=300 D=.perfA/s77 bash benchmarks/experiments/s74-swapped-wide-tiles-65-112-check.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/summary.txt; : > $S
t0=$(date +%s); st() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $S; }
D=${D:-.perfA/s77}; END=${END:-300}; left() { [ $(( $(date +%s) - t0 )) -lt $END ]; }
H=$D/swap4; chmod +x $H
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee -a $S
ab() {  # $1 case, $2 rounds
  for r in $(seq 1 $2); do for v in 0 112; do
    left || return
    FP8GEMM_SWAP_AB=$v $H --bench-only --case="$1" > $OUT/h_${1// /_}_${v}_$r.log 2>&1
    echo "== $1 swap=$v round $r rc=$?" >> $S
    sed -n '/best per case/,$p' $OUT/h_${1// /_}_${v}_$r.log >> $S
  done; done
}
st "A/B 32x256"; ab "32x256" 3
st "check 112"; FP8GEMM_SWAP_AB=112 $H --no-bench > $OUT/check_112.log 2>&1; echo "check swap=112 rc=$? $(tail -1 $OUT/check_112.log)" >> $S
st "wheel + pytest"
pip install -q --no-deps --force-reinstall $D/whl/*.whl > $OUT/pip.log 2>&1
T=$PWD/$D/tests
(cd /tmp && timeout 240 python -m pytest -q -x $T/test_gpu.py -k "grouped or masked or exported" > $OUT/pytest.log 2>&1; echo "pytest rc=$? $(tail -1 $OUT/pytest.log)" >> $S)
st "A/B others"; ab "8x4096" 1; ab "256x1024" 1
if left; then st memcheck; compute-sanitizer --tool memcheck $H --small > $OUT/memcheck.log 2>&1; echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log)" >> $S; fi
if left; then st racecheck; compute-sanitizer --tool racecheck $H --small > $OUT/racecheck.log 2>&1; echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $OUT/racecheck.log)" >> $S; fi
for v in 112 0; do
  left || break
  st "bench $v"; (cd /tmp && FP8GEMM_SWAP_AB=$v timeout 150 python -m jax_fp8gemm.bench --suite grouped --protocol flushed --out /tmp/bo_$v > $OUT/bench_$v.log 2>&1; echo "bench swap=$v rc=$?" >> $S)
done
st done
