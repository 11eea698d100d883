#!/usr/bin/env bash
# The SASS instructions where the dense kernel's warps are sampled most (Nsight Compute warp-state
# sampling), with the stall reasons: where the math warpgroups wait.
#   tools/ncu_sass_hotspots.sh HARNESS MxNxK BMxBN [OUT_DIR]
set -uo pipefail
harness=$1 shape=$2 tile=$3 out=${4:-${OUT:-/tmp}}
rep=/tmp/hot_${shape}_${tile}
ncu --clock-control none -k regex:sm90_fp8_gemm --launch-count 1 --section WarpStateStats \
  --section SourceCounters -f -o "$rep" "$harness" --bench-only --shape="$shape" --tile="$tile" --runs=1 > /dev/null 2>&1
ncu --import "$rep.ncu-rep" --page details --print-details all --section WarpStateStats 2>/dev/null \
  | grep -iE "stall|warp cycles" | head -40 > "$out/stalls_${shape}_${tile}.txt"
ncu --import "$rep.ncu-rep" --page source --print-source sass --csv 2>/dev/null > "$out/sass_${shape}_${tile}.csv"
python3 - "$out/sass_${shape}_${tile}.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
# Newer Nsight Compute versions put a "Kernel Name" row before the header.
start = next((i for i, r in enumerate(rows) if any(h.strip() == "Source" for h in r)), 0)
head, rows = rows[start], rows[start:]
def col(name):
    for i, h in enumerate(head):
        if h.strip().lower() == name.lower():
            return i
    return None
src = col("Source")
samp = col("Warp Stall Sampling (All Samples)") or col("Warp Stall Sampling (All Cycles)")
print("columns:", [h for h in head][:12])
if src is None or samp is None:
    sys.exit(0)
def num(x):
    try: return float(x.replace(",", ""))
    except: return 0.0
body = [r for r in rows[1:] if len(r) > max(src, samp)]
total = sum(num(r[samp]) for r in body) or 1
top = sorted(range(len(body)), key=lambda i: -num(body[i][samp]))[:30]
for i in sorted(top):
    r = body[i]
    print(f"{i:5d} {100 * num(r[samp]) / total:5.1f}%  {r[src][:110]}")
PY
