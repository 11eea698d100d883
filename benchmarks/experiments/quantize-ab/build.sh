#!/usr/bin/env bash
# Builds the quantize+transpose A/B harness: v0 = this repo's cuda/, and one variant per argument
# NAME=PATCH[+PATCH...] (patches in benchmarks/experiments/ or absolute paths), applied to a copy of
# cuda/. Every build goes into one binary under its own namespace.
#   bash benchmarks/experiments/quantize-ab/build.sh v1=s71-quantize-prefetch-addresses.patch  -> $O/qt_ab
#   qt_ab [rounds] [reps] [small]   (small: the bitwise checks alone, for compute-sanitizer)
# Session 71 ran it as v1=...addresses.patch v2=...two-ahead.patch v12=both (RESULTS.md).
set -e
H=$(cd "$(dirname "$0")" && pwd); R=$(cd "$H/../../.." && pwd); O=${O:-/tmp/qt_ab}
rm -rf $O && mkdir -p $O
NV="nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 --expt-relaxed-constexpr -Xptxas=-v"
build() { $NV -Dfp8gemm=fp8gemm_$1 -DSHIM_NAME=qt_$1 -I$2 -c $H/shim.cu -o $O/$1.o > $O/$1.ptxas 2>&1 || { cat $O/$1.ptxas; exit 1; }; }
names=(v0); build v0 $R/cuda &
for spec in "$@"; do
  name=${spec%%=*}; names+=($name)
  mkdir -p $O/$name && cp -r $R/cuda $O/$name/
  IFS=+ read -ra patches <<< "${spec#*=}"
  for p in "${patches[@]}"; do
    [[ $p = /* ]] || p=$H/../$p
    patch -s -d $O/$name -p1 < $p
  done
  build $name $O/$name/cuda &
done
wait
for n in "${names[@]}"; do [ -f $O/$n.o ] || { echo "build of $n failed"; exit 1; }; done
{ for n in "${names[@]}"; do printf 'VARIANT(%s)\n' $n; done; } > $O/variants.inc
$NV -I$O -I$R/tools -I$R/cuda -c $H/harness.cu -o $O/harness.o
nvcc -gencode=arch=compute_90a,code=sm_90a $O/harness.o $(printf "$O/%s.o " "${names[@]}") -o $O/qt_ab
echo built $O/qt_ab: "${names[@]}"
