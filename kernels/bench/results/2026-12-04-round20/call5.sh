#!/usr/bin/env bash
# Round 20, fifth call: the committed realigned backward (one row ahead in
# registers, gamma/dgamma/dbeta words in shared memory, means by 1/H
# products), its tests and compute-sanitizer, against the first call's
# kernel (norm_bench_r20a) and the strided kernel (--backward-realign off),
# then the backward table beside PyTorch.
set -u
tar -C .gpu -xJf .gpu/bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; date -u; nproc; } > $r/device.txt 2>&1
T=.gpu/bin/tests/kernels/kernels_gpu_test
B=.gpu/bin/kernels/bench/norm_bench
A=.gpu/bin/kernels/bench/norm_bench_r20a
S=/usr/local/cuda/bin/compute-sanitizer
echo "== realign tests first"; date -u
timeout 120 $T --gtest_filter='BackwardRealign.*:BackwardEarlyLaunch.*' > $r/realign_test.log 2>&1; rc=$?; echo "rc=$rc"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran|Failure|mismatch' $r/realign_test.log | head -12
if [ $rc -ne 0 ]; then tar czf $OUT/r.tgz -C $OUT r; exit 1; fi
echo "== A/B bench"; date -u
for v in new:$B:on first:$A:on strided:$B:off; do
  IFS=: read name bin mode <<< "$v"
  timeout 60 $bin --backward-only --hidden 2049 --backward-realign $mode --json $r/ab_$name.json > $r/ab_$name.txt 2>&1
  echo "-- $name"; grep -E "^backward" $r/ab_$name.txt | awk '{print $2, $3, $7, $NF}'
done
echo "== full kernels_gpu_test"; date -u
timeout 200 $T > $r/kernels_gpu_test.log 2>&1; echo "rc=$?"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran' $r/kernels_gpu_test.log | tail -8
echo "== sanitizer"; date -u
for tool in memcheck racecheck synccheck; do
  NORMSVC_TEST_MAX_ELEMENTS=65536 timeout 70 $S --tool $tool $T --gtest_filter='BackwardRealign.*:BackwardEarlyLaunch.*' > $r/cs_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|tests? ran' $r/cs_$tool.log | tr '\n' ' ')"
done
echo "== backward table with torch"; date -u
PYTHONUNBUFFERED=1 timeout 150 python3 kernels/bench/compare_torch.py --bench $B --lib $PWD/.gpu/lib --out $r/round20_backward.json --bench-args="--backward-only" > $r/bench.log 2>&1
echo "rc=$?"; grep -E "^backward  " $r/bench.log
date -u >> $r/device.txt
tar czf $OUT/r.tgz -C $OUT r
