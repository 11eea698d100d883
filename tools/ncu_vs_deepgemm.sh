#!/usr/bin/env bash
# Our dense kernel against DeepGEMM's on one shape under Nsight Compute: one launch of each (clocks
# not locked), the same sections, their headline numbers side by side (duration, SM clock, pipes,
# memory traffic, instructions, stalls). For the shapes where DeepGEMM leads at the peak clock
# (RESULTS.md, sessions 42-43: 4096x2112x7168, 4096x32768x512). On the device, after
# `STANDALONE_ARGS=--quick STEPS=build,standalone bash tools/gpu_check.sh` (builds /tmp/gemm_test)
# and with .peer carried (the peer binary is built here if needed):
#   tools/ncu_vs_deepgemm.sh MxNxK OUR_TILE OUR_MULTICAST [OUT_DIR]
#   e.g. tools/ncu_vs_deepgemm.sh 4096x32768x512 256x128 1
# OUR_MULTICAST: 1, 2A or 2B (the harness's --multicast). DeepGEMM runs its heuristic's config
# (the peer's table row of that shape). Both draw normal-valued operands.
set -uo pipefail
shape=$1 tile=$2 mc=$3 out=${4:-${OUT:-/tmp}}
mkdir -p "$out"
bash tools/deepgemm_peer.sh build > "$out/peer_build.log" 2>&1 || { cat "$out/peer_build.log"; exit 1; }
peer=${PEER_BUILD_DIR:-${TMPDIR:-/tmp}/deepgemm_peer_build}/deepgemm_peer
sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
          --section WarpStateStats --section SchedulerStats --section InstructionStats)
ncu --clock-control none -k regex:sm90_fp8_gemm_kernel --launch-count 1 "${sections[@]}" \
  /tmp/gemm_test --bench-only --normal --shape="$shape" --tile="$tile" --multicast="$mc" --runs=1 \
  > "$out/ncu_ours_$shape.txt" 2>&1
ncu --clock-control none -k regex:sm90_fp8_gemm_1d2d_impl --launch-count 1 "${sections[@]}" \
  "$peer" --shapes "$shape" --normal --no-check --warmup 0 --iters 1 --flush-iters 0 \
  > "$out/ncu_deepgemm_$shape.txt" 2>&1
# One line per metric: its value for ours, then for DeepGEMM.
pattern='SM Frequency|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Executed Ipc Active|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Instructions  |Registers Per|Dynamic Shared'
paste -d'|' <(grep -E "$pattern" "$out/ncu_ours_$shape.txt" | sed 's/  */ /g') \
            <(grep -E "$pattern" "$out/ncu_deepgemm_$shape.txt" | awk '{print $NF}') |
  awk -F'|' -v s="$shape" 'BEGIN {print "ncu " s ": metric unit ours | DeepGEMM"} {print "  " $1 " | " $2}'
