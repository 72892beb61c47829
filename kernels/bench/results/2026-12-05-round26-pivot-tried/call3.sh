#!/usr/bin/env bash
# Round 26: LayerNorm's in-block statistic in one reduction about the row's
# first element. kernels_gpu_test of the change, compute-sanitizer memcheck
# over the forward tests, then norm_bench --forward-only of HEAD (2a540c9)
# and of the change, interleaved three times.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
tar -C .gpu-r26 -xJf .gpu-r26/bundle.tar.xz
o=$OUT/r26; mkdir -p $o
finish() { tar czf $OUT/r26.tgz -C $OUT r26; echo "tarred at $(el) s"; }
trap finish EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; date -u; } > $o/device.txt 2>&1
cat $o/device.txt
L=$PWD/.gpu-r26/lib; B=.gpu-r26/bin
LD_LIBRARY_PATH=$L timeout 200 $B/tests/kernels/kernels_gpu_test > $o/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? at $(el) s"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED  \]' $o/kernels_gpu_test.log | tail -12
for r in 1 2 3; do for v in head new; do
  bin=$B/kernels/bench/norm_bench; [ $v = head ] && bin=$B/ab/norm_bench_head
  LD_LIBRARY_PATH=$L timeout 70 $bin --forward-only --json $o/${v}_$r.json > $o/${v}_$r.txt 2>&1
  echo "$v $r rc=$? at $(el) s"
done; done
CS=$(ls /usr/local/cuda/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
LD_LIBRARY_PATH=$L timeout 100 $CS --tool memcheck $B/tests/kernels/kernels_gpu_test \
  --gtest_filter='ForwardRealign*:*Special*:ForwardRing*' > $o/memcheck.log 2>&1
echo "memcheck rc=$? at $(el) s"; grep -E "ERROR SUMMARY|PASSED|FAILED" $o/memcheck.log | tail -4
echo "end at $(el) s"
