#!/usr/bin/env bash
# Kernel and server tests at HEAD, compute-sanitizer over the staged tests. Results under $OUT.
set -u
cd "$(dirname "$0")"
mkdir -p g && tar -C g -xJf bundle.tar.xz
lib=$PWD/g/lib
o=$OUT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; date -u; } > $o/device.txt 2>&1; cat $o/device.txt
t0=$(date +%s)
LD_LIBRARY_PATH=$lib timeout 200 g/bin/tests/kernels/kernels_gpu_test > $o/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? $(( $(date +%s) - t0 )) s"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED' $o/kernels_gpu_test.log | tail -n 8
for tool in memcheck racecheck; do
  t0=$(date +%s)
  LD_LIBRARY_PATH=$lib timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool $tool g/bin/tests/kernels/kernels_gpu_test --gtest_filter='ForwardStaged.MatchesReferenceOnEveryVariant:ForwardStaged.RowsGiveTheSameBitsInAMixedLaunch' > $o/cs_$tool.log 2>&1
  echo "$tool rc=$? $(( $(date +%s) - t0 )) s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $o/cs_$tool.log | tail -1)"
done
t0=$(date +%s)
NORMSVC_SERVER_BINARY=$PWD/g/bin/server/normsvc LD_LIBRARY_PATH=$lib timeout 250 g/bin/tests/server/server_test > $o/server_test.log 2>&1
echo "server_test rc=$? $(( $(date +%s) - t0 )) s"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED' $o/server_test.log | tail -n 8
tar -C $o -czf /tmp/logs.tgz . && mv /tmp/logs.tgz $o/logs.tgz
