#!/usr/bin/env bash
# Bigger batches by waiting: --max_queue_delay_us 50 and 100 beside the
# defaults (default 0), per-thread-group CPU, two interleaved repetitions.
set -u
tar -C .gpu -xJf .gpu/bundle.tar.xz
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; nproc; } > $r/device.txt 2>&1
VARIANTS="qd50=--max_queue_delay_us=50;qd100=--max_queue_delay_us=100" VARIANT_LOADS="c64 c64x16" \
  LD_LIBRARY_PATH=$PWD/.gpu/lib client/bench/thread_cpu.sh .gpu/bin $r/tc 2 4 > $r/tc.log 2>&1
date -u >> $r/device.txt
grep -E "\.(c64|c64x16) \|" $r/tc/summary.md
tar czf $OUT/r.tgz -C $OUT r
