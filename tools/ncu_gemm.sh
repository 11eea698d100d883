#!/usr/bin/env bash
# Where the dense kernel's time goes, for one shape and tile (run on the device, after the
# standalone harness is built, e.g. by `STEPS=standalone bash tools/gpu_check.sh`):
#   1. SM clock and board power while the timing loop runs (is the chip power-throttled?)
#   2. one launch under Nsight Compute (clocks not locked): pipe utilisation, memory throughput,
#      warp stall reasons.
#   tools/ncu_gemm.sh HARNESS MxNxK BMxBN [OUT_DIR]
# HARNESS: /tmp/gemm_test (dense forward) or /tmp/wgrad_test (dense wgrad; MxNxK = M x N x tokens),
# both built by the standalone step.
set -uo pipefail
harness=$1 shape=$2 tile=$3 out=${4:-${OUT:-/tmp}}
tag="${shape}_${tile}"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 50 > "$out/clock_$tag.csv" &
smi=$!
"$harness" --bench-only --shape="$shape" --tile="$tile" --runs=60 | grep -E "  bench|  dense "
kill $smi
# The samples as they came (50 ms apart; power readings lag): the clock falls as the load holds.
echo "  SM clock MHz / power W while timing: $(sed 's/ MHz//; s/ W//' "$out/clock_$tag.csv" \
  | awk -F', ' '{printf "%s/%.0f ", $1, $2}')"
ncu --clock-control none -k regex:sm90_fp8_gemm --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats \
  "$harness" --bench-only --shape="$shape" --tile="$tile" --runs=1 > "$out/ncu_$tag.txt" 2>&1
grep -E "SM Frequency|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|Executed Ipc A|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall|Tensor|Pipe|L1/TEX Hit|Mem Busy|Max Bandwidth" "$out/ncu_$tag.txt" | head -40
