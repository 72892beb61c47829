#!/usr/bin/env bash
# HEAD's norm_bench (build-g1, from the previous call on this machine) against a0f3656's, interleaved twice.
set -u
cd "$(dirname "$0")"
xz -dc prev.xz > prev && chmod +x prev
lib=$PWD/../build-g1/g/lib
new=$PWD/../build-g1/g/bin/kernels/bench/norm_bench
o=$OUT
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } > $o/device.txt; cat $o/device.txt
for rep in 1 2; do
for s in "fp32 262144" "bf16 262144" "fp32 131072" "bf16 524288" "fp32 65536"; do
  set -- $s
  for b in new prev; do
    bin=$new; [ $b = prev ] && bin=./prev
    LD_LIBRARY_PATH=$lib timeout 60 $bin --forward-only --hidden $2 --dtype $1 > $o/${b}_$1_$2_r$rep.log 2>&1
    echo "$b r$rep: $(grep -E '^forward' $o/${b}_$1_$2_r$rep.log | awk '{print $2, $3, $5, $6, $7, $8, $NF}' | tr '\n' ';')"
  done
done; done
tar -C $o -czf /tmp/ab.tgz . && rm -f $o/*.log && mv /tmp/ab.tgz $o/ab.tgz
