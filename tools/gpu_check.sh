#!/usr/bin/env bash
# The one script for a lent Hopper machine (the `device` tool runs it in a copy of the repo):
# build the extension, read the register/spill report and the SASS, run the GPU tests, the
# standalone GEMM harnesses (dense, grouped, wgrad), compute-sanitizer on small cases and the benchmark.
# Logs go to $OUT (at most 8 files come back: keep it so).
#
#   STEPS=build,tests,standalone,sanitize,bench  (default: all)   BENCH_ARGS="--suite gemm"
#   STEPS=...,stress   tools/stress_repeat.py (STRESS_ARGS, e.g. "--rounds 30 --repeats 100"): every op
#                      run many times on the same inputs, for intermittent faults (not in the default)
#   TESTS="tests/test_gpu.py"                                      (default: the suite but test_sharding.py,
#                                                                  ~425 s on an H200; TEST_TIMEOUT, default 530)
#   STANDALONE_ARGS / GROUPED_ARGS / WGRAD_ARGS: options of the dense / grouped / wgrad harness
#   (e.g. "--no-bench")
set -uo pipefail
OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
STEPS=${STEPS:-build,tests,standalone,sanitize,bench}
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-16}
PY=${PY:-python3}
has() { [[ ",$STEPS," == *",$1,"* ]]; }
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s]"; }

# Wheels the machine lacks travel in .whl/ (named in the run's carry).
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a "$summary"
note "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown) $(git status --porcelain 2>/dev/null | grep -q . && echo '+uncommitted')"

if has build; then
  note "$(stamp) build"
  if ! $PY -m pip install --no-build-isolation --no-deps -v . \
      -Ccmake.define.FP8GEMM_PTXAS_VERBOSE=ON > "$OUT/build.log" 2>&1; then
    note "BUILD FAILED"; tail -40 "$OUT/build.log"; exit 1
  fi
  so=$(cd /tmp && $PY -c "import jax_fp8gemm._cuda as c; print(c.__file__)")
  note "registers / spills (ptxas):"
  $PY tools/ptxas_report.py "$OUT/build.log" >> "$summary"
  cuobjdump -sass "$so" > /tmp/sass.txt
  note "SASS: QGMMA=$(grep -c QGMMA /tmp/sass.txt) UTMALDG=$(grep -c UTMALDG /tmp/sass.txt)" \
       "UTMASTG=$(grep -c UTMASTG /tmp/sass.txt) STSM=$(grep -c STSM /tmp/sass.txt)" \
       "LDL=$(grep -c 'LDL' /tmp/sass.txt) STL=$(grep -c 'STL' /tmp/sass.txt)"
fi

if has standalone && [ -f tools/gemm_standalone_test.cu ]; then
  note "$(stamp) standalone GEMM harnesses (dense, grouped, wgrad)"
  # The kernel objects are compiled once, in parallel, and linked into both harnesses.
  NVCC=(nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 --expt-relaxed-constexpr -Icuda)
  mkdir -p /tmp/gemm_objs
  objs=()
  for f in cuda/gemm/*.cu; do
    o=/tmp/gemm_objs/$(basename "$f" .cu).o; objs+=("$o")
    "${NVCC[@]}" -c "$f" -o "$o" >> "$OUT/standalone.log" 2>&1 &
  done
  wait
  "${NVCC[@]}" tools/gemm_standalone_test.cu "${objs[@]}" -o /tmp/gemm_test >> "$OUT/standalone.log" 2>&1 \
    && timeout ${STANDALONE_TIMEOUT:-200} /tmp/gemm_test ${STANDALONE_ARGS:-} >> "$OUT/standalone.log" 2>&1
  note "standalone (dense) exit $?: $(tail -3 "$OUT/standalone.log" | tr '\n' ' ')"
  echo "==== grouped harness" >> "$OUT/standalone.log"
  "${NVCC[@]}" tools/grouped_standalone_test.cu "${objs[@]}" -o /tmp/grouped_test >> "$OUT/standalone.log" 2>&1 \
    && timeout ${GROUPED_TIMEOUT:-300} /tmp/grouped_test ${GROUPED_ARGS:-} >> "$OUT/standalone.log" 2>&1
  note "standalone (grouped) exit $?: $(tail -1 "$OUT/standalone.log")"
  echo "==== wgrad harness" >> "$OUT/standalone.log"
  "${NVCC[@]}" tools/wgrad_standalone_test.cu "${objs[@]}" -o /tmp/wgrad_test >> "$OUT/standalone.log" 2>&1 \
    && timeout ${WGRAD_TIMEOUT:-300} /tmp/wgrad_test ${WGRAD_ARGS:-} >> "$OUT/standalone.log" 2>&1
  note "standalone (wgrad) exit $?: $(tail -1 "$OUT/standalone.log")"
  sed -n '/^best per case/,/^[0-9]* passed/p' "$OUT/standalone.log" | tee -a "$summary"
fi

if has tests; then
  note "$(stamp) tests"
  (cd /tmp && $PY -c "import jax_fp8gemm as fg; print('kernels enabled:', fg.kernels_enabled())") \
    | tee -a "$summary"
  # test_sharding.py runs its checks on CPU devices (JAX_PLATFORMS=cpu) whatever the machine: CI
  # covers it, and here it would cost ~65 s of the 600 a device call may take. -v: a run the limit
  # cuts short still names each test's outcome.
  timeout ${TEST_TIMEOUT:-530} pytest -v -p no:cacheprovider --durations=12 ${TESTS:-tests --ignore=tests/test_sharding.py} \
    > "$OUT/tests.log" 2>&1
  note "tests: $(tail -1 "$OUT/tests.log")"
  grep -E "^(FAILED|ERROR)| (FAILED|ERROR) " "$OUT/tests.log" | head -20 | tee -a "$summary"
fi

if has stress; then
  note "$(stamp) stress (tools/stress_repeat.py ${STRESS_ARGS:-})"
  (cd /tmp && timeout ${STRESS_TIMEOUT:-300} $PY "$OLDPWD/tools/stress_repeat.py" ${STRESS_ARGS:-}) > "$OUT/stress.log" 2>&1
  note "stress exit $?"
  grep -E "rounds x|FAIL|PASSED" "$OUT/stress.log" | tee -a "$summary"
fi

if has sanitize; then
  note "$(stamp) compute-sanitizer (small shapes)"
  {
    if [ -x /tmp/gemm_test ]; then
      timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/gemm_test --small; echo "memcheck gemm: $?"
      timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 /tmp/gemm_test --small; echo "racecheck gemm: $?"
    fi
    if [ -x /tmp/grouped_test ]; then
      timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/grouped_test --small; echo "memcheck grouped: $?"
      timeout 180 compute-sanitizer --tool racecheck --error-exitcode 9 /tmp/grouped_test --small; echo "racecheck grouped: $?"
    fi
    if [ -x /tmp/wgrad_test ]; then
      timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/wgrad_test --small; echo "memcheck wgrad: $?"
      timeout 180 compute-sanitizer --tool racecheck --error-exitcode 9 /tmp/wgrad_test --small; echo "racecheck wgrad: $?"
    fi
    (cd /tmp && XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 240 compute-sanitizer --tool memcheck \
      --error-exitcode 9 $PY "$OLDPWD/tools/sanitize_small.py"); echo "memcheck jax ops: $?"
    # the quantizers only (--kernel-name): XLA's own kernels uninstrumented, seconds instead of minutes
    (cd /tmp && XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 240 compute-sanitizer --tool racecheck \
      --kernel-name kns=quantize --error-exitcode 9 $PY "$OLDPWD/tools/sanitize_small.py" quantize); \
      echo "racecheck quantize ops: $?"
    (cd /tmp && XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 240 compute-sanitizer --tool memcheck \
      --kernel-name kns=quantize --error-exitcode 9 $PY "$OLDPWD/tools/sanitize_small.py" quantize); \
      echo "memcheck quantize ops (multi-tile): $?"
  } > "$OUT/sanitize.log" 2>&1
  grep -E "^(memcheck|racecheck)|ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize.log" | tee -a "$summary"
fi

if has bench; then
  note "$(stamp) benchmark"
  (cd /tmp && timeout ${BENCH_TIMEOUT:-400} $PY -m jax_fp8gemm.bench --out "$OUT" ${BENCH_ARGS:-}) > "$OUT/bench.log" 2>&1
  sed -n '/^## /,$p' "$OUT/bench.log" | tee -a "$summary"
fi
note "$(stamp) done"
