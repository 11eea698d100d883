#!/usr/bin/env bash
# Peer benchmark: DeepGEMM's own SM90 dense FP8 kernel (sm90_fp8_gemm_1d2d_impl), built standalone
# by tools/deepgemm_peer.cu, so that it can be timed on the same lent H100 as our kernels.
#
#   tools/deepgemm_peer.sh prepare       (development machine) extract DeepGEMM's deep_gemm/include
#                                        and CUTLASS's include/ into .peer/ (ignored through
#                                        .git/info/exclude; carry ".peer" to the GPU machine)
#   tools/deepgemm_peer.sh build         compile only (what `run` does before running)
#   tools/deepgemm_peer.sh run [args]    (GPU machine, repo root) compile, then run the harness;
#                                        args go to the harness (--shapes MxNxK,... --grouped ...
#                                        --sizes-file F --iters N ...).
#                                        Output is also written to $OUT/deepgemm_peer.log if OUT is set.
#   tools/deepgemm_peer.sh sizes         print the group sizes of the benchmark's uneven grouped cases
#                                        (jax_fp8gemm/bench/suites.py, same draw) as a --sizes-file
#
# Environment: NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc), PEER_JOBS (parallel
# compiles, default: all cores), PEER_BUILD_DIR (default /tmp/deepgemm_peer_build), PEER_REBUILD=1
# (ignore the build stamp), PEER_SINGLE_TU=1|0 (one translation unit, or one per kernel compiled in
# parallel; default: one TU below 8 cores),
# PEER_EXTRA_NVCC_FLAGS (e.g. -DPEER_NUM_SMS=114); for prepare: DEEPGEMM_GIT_DIR, DEEPGEMM_REV
# (default HEAD), CUTLASS_WHL.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PEER=$ROOT/.peer
SRC=tools/deepgemm_peer.cu
# Build outputs live outside .peer/ (which carry replaces on every call) so that a warm GPU machine
# reuses them; the stamp (nvcc version, flags, sources) decides whether to rebuild.
BUILD=${PEER_BUILD_DIR:-${TMPDIR:-/tmp}/deepgemm_peer_build}
BIN=$BUILD/deepgemm_peer
NUM_CONFIGS=20  # number of X(...) rows in PEER_CONFIGS of $SRC; checked below

mode=${1:-}
[[ $# -gt 0 ]] && shift

find_nvcc() {
  if [[ -n "${NVCC:-}" ]]; then echo "$NVCC"; return; fi
  if command -v nvcc >/dev/null 2>&1; then command -v nvcc; return; fi
  for c in /usr/local/cuda/bin/nvcc /usr/local/bin/nvcc; do
    [[ -x $c ]] && { echo "$c"; return; }
  done
  echo "deepgemm_peer.sh: nvcc not found (set NVCC)" >&2
  exit 1
}

prepare() {
  local git_dir=${DEEPGEMM_GIT_DIR:-/work/.mirror/deepseek-ai+DeepGEMM/repo}
  local rev=${DEEPGEMM_REV:-HEAD}
  local whl=${CUTLASS_WHL:-/tmp/wheels/nvidia_cutlass-4.2.0.0-py3-none-any.whl}
  [[ -d $git_dir ]] || { echo "DeepGEMM git dir not found: $git_dir" >&2; exit 1; }
  [[ -f $whl ]] || { echo "CUTLASS wheel not found: $whl" >&2; exit 1; }

  rm -rf "$PEER"
  mkdir -p "$PEER/deepgemm" "$PEER/cutlass"

  # DeepGEMM: only the kernel headers (deep_gemm/include).
  git --git-dir="$git_dir" archive "$rev" deep_gemm/include | tar -x -C "$PEER/deepgemm"
  local dg_commit
  dg_commit=$(git --git-dir="$git_dir" rev-parse "$rev")

  # CUTLASS/CuTe: the include/ tree of the wheel (cutlass_library/source/include/{cute,cutlass}).
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  python3 - "$whl" "$tmp" <<'EOF'
import sys, zipfile
whl, dst = sys.argv[1], sys.argv[2]
prefix = "cutlass_library/source/include/"
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
    if not names:
        sys.exit("no %s in %s" % (prefix, whl))
    for n in names:
        z.extract(n, dst)
EOF
  mv "$tmp/cutlass_library/source/include" "$PEER/cutlass/include"
  local cutlass_version
  cutlass_version=$(awk '/#define CUTLASS_(MAJOR|MINOR|PATCH)/ {printf "%s%s", sep, $3; sep="."}' \
                    "$PEER/cutlass/include/cutlass/version.h")

  {
    echo "deepgemm_commit=$dg_commit"
    echo "cutlass_version=$cutlass_version ($(basename "$whl"))"
    echo "prepared=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  } > "$PEER/VERSION"

  # Keep .peer/ out of git without touching .gitignore.
  local exclude
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  grep -qxF '/.peer/' "$exclude" 2>/dev/null || echo '/.peer/' >> "$exclude"

  cat "$PEER/VERSION"
  du -sh "$PEER"
}

build() {
  [[ -d $PEER/deepgemm/deep_gemm/include && -d $PEER/cutlass/include/cute ]] ||
    { echo "deepgemm_peer.sh: $PEER is missing its include trees; run 'tools/deepgemm_peer.sh prepare' (and carry .peer)" >&2; exit 1; }
  local nvcc
  nvcc=$(find_nvcc)
  local n_rows
  n_rows=$(grep -cE '^ *X\([0-9]+,' "$SRC")
  [[ $n_rows -eq $NUM_CONFIGS ]] ||
    { echo "deepgemm_peer.sh: $SRC has $n_rows config rows, the script expects $NUM_CONFIGS" >&2; exit 1; }
  python3 tools/deepgemm_peer_configs.py --check >&2 || exit 1  # the rows are DeepGEMM's own picks

  local dg_commit
  dg_commit=$(sed -n 's/^deepgemm_commit=//p' "$PEER/VERSION" 2>/dev/null || true)
  # Flags as DeepGEMM's JIT (csrc/jit/compiler.hpp) uses them: C++20, -O3, relaxed constexpr,
  # extended lambdas, --register-usage-level=10; plus -Xptxas -v for the register report.
  local -a flags=(
    -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++20
    --expt-relaxed-constexpr --expt-extended-lambda
    --diag-suppress=39,161,174,177,186,940
    -Xptxas=-v,--register-usage-level=10,--warn-on-local-memory-usage
    -Xcompiler=-O3,-Wno-deprecated-declarations
    -I.peer/deepgemm/deep_gemm/include -I.peer/cutlass/include
    -DPEER_DG_COMMIT="\"${dg_commit:-unknown}\""
  )
  # shellcheck disable=SC2206
  [[ -n "${PEER_EXTRA_NVCC_FLAGS:-}" ]] && flags+=(${PEER_EXTRA_NVCC_FLAGS})

  # One TU is ~20 s (the CuTe/CUTLASS front end once, ptxas ~1 s per kernel); one TU per kernel
  # repeats the ~7 s front end but runs in parallel: faster only with many cores.
  local single_tu=${PEER_SINGLE_TU:-}
  [[ -n $single_tu ]] || single_tu=$([[ $(nproc) -ge 8 ]] && echo 0 || echo 1)

  mkdir -p "$BUILD"
  local stamp_new
  stamp_new=$( { "$nvcc" --version; printf '%s\n' "${flags[@]}" "$single_tu";
                 cat "$SRC" "$PEER/VERSION" 2>/dev/null; } | sha256sum | cut -d' ' -f1)
  if [[ -x $BIN && -f $BUILD/stamp && "$(cat "$BUILD/stamp")" == "$stamp_new" && -z "${PEER_REBUILD:-}" ]]; then
    echo "deepgemm_peer: up to date ($BIN); PEER_REBUILD=1 to force"
    return
  fi
  rm -f "$BIN" "$BUILD/stamp"

  echo "deepgemm_peer: building with $nvcc ($("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')," \
       "$([[ $single_tu != 0 ]] && echo "one translation unit" || echo "$((NUM_CONFIGS + 1)) translation units in parallel"))"
  local t0=$SECONDS
  if [[ "$single_tu" != 0 ]]; then
    "$nvcc" "${flags[@]}" "$SRC" -o "$BIN" > "$BUILD/build.log" 2>&1 ||
      { cat "$BUILD/build.log" >&2; echo "deepgemm_peer: build failed" >&2; exit 1; }
  else
    # One translation unit per kernel config (PEER_TU=i) and one for the host program (PEER_TU=-1),
    # compiled in parallel, then linked.
    local max_jobs=${PEER_JOBS:-$(nproc)}
    local -a objs=() tags=()
    local i running=0
    rm -f "$BUILD"/*.o "$BUILD"/*.rc "$BUILD"/*.log
    for ((i = -1; i < NUM_CONFIGS; ++i)); do
      local tag=k$i
      [[ $i -lt 0 ]] && tag=main
      if (( running >= max_jobs )); then wait -n || true; running=$((running - 1)); fi
      ( "$nvcc" "${flags[@]}" -DPEER_TU="$i" -c "$SRC" -o "$BUILD/$tag.o" > "$BUILD/$tag.log" 2>&1
        echo $? > "$BUILD/$tag.rc" ) &
      running=$((running + 1))
      objs+=("$BUILD/$tag.o"); tags+=("$tag")
    done
    wait
    local failed=0 tag
    for tag in "${tags[@]}"; do
      if [[ "$(cat "$BUILD/$tag.rc" 2>/dev/null)" != 0 ]]; then
        failed=1
        echo "---- compile of $tag (PEER_TU=${tag#k}) failed:" >&2
        cat "$BUILD/$tag.log" >&2
      fi
    done
    cat "$BUILD"/main.log "$BUILD"/k*.log > "$BUILD/build.log"
    [[ $failed -eq 0 ]] || { echo "deepgemm_peer: build failed" >&2; exit 1; }
    "$nvcc" -gencode=arch=compute_90a,code=sm_90a "${objs[@]}" -o "$BIN" >> "$BUILD/build.log" 2>&1 ||
      { cat "$BUILD/build.log" >&2; echo "deepgemm_peer: link failed" >&2; exit 1; }
  fi
  echo "$stamp_new" > "$BUILD/stamp"
  echo "deepgemm_peer: built $BIN in $((SECONDS - t0)) s; ptxas report:"
  ptxas_report "$BUILD/build.log"
}

# Register / spill lines of the DeepGEMM kernels, one per instantiation (template arguments decoded
# from the mangled name).
ptxas_report() {
  awk '
    /Compiling entry function .*sm90_fp8_gemm_1d2d_impl/ {
      s = $0
      sub(/.*MajorE0E/, "", s); sub(/ELNS_8GemmType.*/, "", s)
      gsub(/ELj|ELb/, " ", s); sub(/^Lj/, "", s)
      n = split(s, a, " ")
      # SHAPE_M N K groups BM BN BK swzA swzB swzD stages tma math multicast onA SMs
      cur = sprintf("N=%-5s K=%-5s BLOCK_M=%-3s BLOCK_N=%-3s stages=%-2s swzD=%-3s threads=%s+%s multicast=%s%s SMs=%s",
                    a[2], a[3], a[5], a[6], a[11], a[10], a[12], a[13], a[14], (a[14] > 1 ? (a[15] ? "(A)" : "(B)") : ""), a[16])
      spill = ""
      next
    }
    cur != "" && /spill stores/ { spill = $0; gsub(/^ +/, "", spill); next }
    cur != "" && /Used [0-9]+ registers/ {
      r = $0; sub(/.*Used /, "", r)
      printf "  %s: %s; %s\n", cur, r, spill
      cur = ""
    }' "$1"
}

run() {
  local log=/dev/null
  if [[ -n "${OUT:-}" ]]; then
    mkdir -p "$OUT"
    log=$OUT/deepgemm_peer.log
    : > "$log"
  fi
  local rc=0
  set +e
  {
    echo "# deepgemm_peer $(date -u +%Y-%m-%dT%H:%M:%SZ) repo=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    [[ -f $PEER/VERSION ]] && sed 's/^/# /' "$PEER/VERSION"
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm --format=csv,noheader 2>/dev/null | sed 's/^/# /'
  } 2>&1 | tee -a "$log"
  ( set -e; build ) 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  if [[ $rc -eq 0 ]]; then
    "$BIN" "$@" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
  fi
  set -e
  echo "deepgemm_peer: exit status $rc" | tee -a "$log"
  return "$rc"
}

# The uneven cases of `python -m jax_fp8gemm.bench --suite grouped` with the sizes it runs them
# with (suites.grouped_case_sizes): lines "G N K size_0 ... size_{G-1}".
sizes() {
  python3 - <<'EOF'
from jax_fp8gemm.bench import suites
for (g, rows, n, k, uneven), sizes in zip(suites.GROUPED_CASES, suites.grouped_case_sizes()):
    if uneven:
        print(g, n, k, *sizes.tolist())
EOF
}

case "$mode" in
  prepare) prepare ;;
  sizes) sizes ;;
  build) build ;;
  run) run "$@" ;;
  *)
    echo "usage: $0 prepare | build | sizes | run [--shapes MxNxK,...] [--grouped cGxRxNxK,...] [...]" >&2
    exit 2
    ;;
esac
