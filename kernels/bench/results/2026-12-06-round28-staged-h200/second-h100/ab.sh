#!/usr/bin/env bash
# Staged (this build) against streamed (the build before) on one card, interleaved twice.
set -u
cd "$(dirname "$0")"
mkdir -p g && tar -C g -xJf bundle.tar.xz && xz -dc old_norm_bench.xz > old && chmod +x old
o=$OUT
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/device.txt; date -u >> $o/device.txt; cat $o/device.txt
for rep in 1 2; do
for s in "fp32 131072" "fp32 262144" "bf16 262144" "bf16 524288"; do
  set -- $s
  for b in new old; do
    bin=g/bin/kernels/bench/norm_bench; [ $b = old ] && bin=./old
    LD_LIBRARY_PATH=$PWD/g/lib timeout 60 $bin --forward-only --hidden $2 --dtype $1 > $o/${b}_$1_$2_r$rep.txt 2>&1
    echo "$b r$rep: $(grep -E '^forward' $o/${b}_$1_$2_r$rep.txt | awk '{print $2, $3, $5, $6, $7, $NF}' | tr '\n' ';')"
  done
done; done
tar -C $o -czf $o/ab.tgz --exclude ab.tgz . && find $o -name '*.txt' ! -name device.txt -delete
