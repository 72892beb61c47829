#!/usr/bin/env bash
# Round 20 on the H200: the realigned backward, tests, sanitizer, A/B bench.
set -u
tar -C .gpu -xJf .gpu/bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; date -u; nproc; } > $r/device.txt 2>&1
T=.gpu/bin/tests/kernels/kernels_gpu_test
B=.gpu/bin/kernels/bench/norm_bench
S=/usr/local/cuda/bin/compute-sanitizer
echo "== new test first"; date -u
timeout 120 $T --gtest_filter='BackwardRealign.*:BackwardEarlyLaunch.*' > $r/realign_test.log 2>&1; echo "rc=$?"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran|Failure|mismatch' $r/realign_test.log | head -20
echo "== A/B bench"; date -u
for rep in 1 2; do
  for mode in on off; do
    timeout 60 $B --backward-only --hidden 2049 --backward-realign $mode --json $r/bwd2049_${mode}_$rep.json > $r/bwd2049_${mode}_$rep.txt 2>&1
    echo "-- $mode $rep"; grep -E "backward" $r/bwd2049_${mode}_$rep.txt | head -8
  done
done
echo "== full kernels_gpu_test"; date -u
timeout 200 $T > $r/kernels_gpu_test.log 2>&1; echo "rc=$?"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran' $r/kernels_gpu_test.log | tail -12
echo "== sanitizer"; date -u
for tool in memcheck racecheck synccheck initcheck; do
  NORMSVC_TEST_MAX_ELEMENTS=65536 timeout 90 $S --tool $tool $T --gtest_filter='BackwardRealign.*:BackwardEarlyLaunch.*' > $r/cs_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|tests? ran' $r/cs_$tool.log | tr '\n' ' ')"
done
date -u
echo "== server_test"; date -u
NORMSVC_SERVER_BINARY=$PWD/.gpu/bin/server/normsvc timeout 170 .gpu/bin/tests/server/server_test > $r/server_test.log 2>&1
echo "rc=$?"; grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $r/server_test.log | head
echo "== backward table with torch"; date -u
PYTHONUNBUFFERED=1 timeout 150 python3 kernels/bench/compare_torch.py --bench $B --lib $PWD/.gpu/lib --out $r/round20_backward.json --bench-args="--backward-only" > $r/bench.log 2>&1
echo "rc=$?"; tail -n 40 $r/bench.log
date -u >> $r/device.txt
tar czf $OUT/r.tgz -C $OUT r
