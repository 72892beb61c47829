#!/usr/bin/env bash
# Round 20, sixth call: the committed tree (call 5's kernel with its
# per-word dispatch factored into ForEachWordInRow, which changed ptxas's
# register allocation), its GPU tests, the A/B at H = 2049 and server_test.
set -u
tar -C .gpu -xJf .gpu/bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } > $r/device.txt 2>&1
T=.gpu/bin/tests/kernels/kernels_gpu_test
B=.gpu/bin/kernels/bench/norm_bench
for mode in on off; do
  timeout 60 $B --backward-only --hidden 2049 --backward-realign $mode --json $r/ab_$mode.json > $r/ab_$mode.txt 2>&1
  echo "-- $mode"; grep -E "^backward" $r/ab_$mode.txt | awk '{print $2, $3, $7, $NF}'
done
timeout 200 $T > $r/kernels_gpu_test.log 2>&1; echo "kernels_gpu_test rc=$?"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran' $r/kernels_gpu_test.log | tail -4
NORMSVC_SERVER_BINARY=$PWD/.gpu/bin/server/normsvc timeout 170 .gpu/bin/tests/server/server_test > $r/server_test.log 2>&1
echo "server_test rc=$?"; grep -E '^\[  (PASSED|FAILED) ' $r/server_test.log | head -3
date -u >> $r/device.txt
tar czf $OUT/r.tgz -C $OUT r
