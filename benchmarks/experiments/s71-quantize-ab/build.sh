#!/usr/bin/env bash
# Builds the quantize+transpose A/B harness (session 71): v0 = this repo's cuda/, v1 / v2 / v12 = it
# with ../s71-quantize-prefetch-addresses.patch, ../s71-quantize-prefetch-two-ahead.patch, or both.
#   bash benchmarks/experiments/s71-quantize-ab/build.sh   -> /tmp/s71ab/qt_ab
#   qt_ab [rounds] [reps] [small]   (small: the bitwise checks alone, for compute-sanitizer)
set -e
H=$(cd "$(dirname "$0")" && pwd); R=$(cd "$H/../../.." && pwd); O=${O:-/tmp/s71ab}
rm -rf $O && mkdir -p $O
tree() {  # tree NAME PATCH...: a copy of cuda/ with the patches applied
  local name=$1; shift
  mkdir -p $O/$name && cp -r $R/cuda $O/$name/
  for p in "$@"; do patch -s -d $O/$name -p1 < $H/../$p; done
}
tree v1 s71-quantize-prefetch-addresses.patch
tree v2 s71-quantize-prefetch-two-ahead.patch
tree v12 s71-quantize-prefetch-addresses.patch s71-quantize-prefetch-two-ahead.patch
NV="nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 --expt-relaxed-constexpr -Xptxas=-v"
build() { $NV -Dfp8gemm=fp8gemm_$1 -DSHIM_NAME=qt_$1 -I$2 -c $H/shim.cu -o $O/$1.o > $O/$1.ptxas 2>&1 || { cat $O/$1.ptxas; exit 1; }; }
build v0 $R/cuda & build v1 $O/v1/cuda & wait
build v2 $O/v2/cuda & build v12 $O/v12/cuda & wait
$NV -I$R/tools -I$R/cuda -c $H/harness.cu -o $O/harness.o
nvcc -gencode=arch=compute_90a,code=sm_90a $O/harness.o $O/v0.o $O/v1.o $O/v2.o $O/v12.o -o $O/qt_ab
echo built $O/qt_ab
