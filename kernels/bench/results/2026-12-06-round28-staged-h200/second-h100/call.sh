#!/usr/bin/env bash
# GPU call 2: full kernel and server tests, staged vs streamed. Results under $OUT.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/bundle.tar.xz
lib=$PWD/.gpu/lib
o=$OUT
date -u > $o/date.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > $o/device.txt 2>&1
cat $o/device.txt
t0=$(date +%s)
LD_LIBRARY_PATH=$lib timeout 200 .gpu/bin/tests/kernels/kernels_gpu_test --gtest_output=xml:$o/kernels_gpu_test.xml > $o/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? $(( $(date +%s) - t0 )) s"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED' $o/kernels_gpu_test.log | tail -n 8
nb() { LD_LIBRARY_PATH=$lib timeout 60 "$@"; }
mkdir -p $o/large
for d in bf16 fp32; do for h in 131072 262144 524288; do
  nb .gpu/bin/kernels/bench/norm_bench --forward-only --hidden $h --dtype $d --json $o/large/staged_${d}_$h.json > $o/large/staged_${d}_$h.txt 2>&1
done; done
for f in $o/large/*.txt; do echo "== $(basename $f)"; grep -E "^forward" $f; done
tar -C $o -czf $o/large.tgz large && rm -rf $o/large
cs=/usr/local/cuda/bin/compute-sanitizer
for tool in memcheck racecheck synccheck; do
  t0=$(date +%s)
  LD_LIBRARY_PATH=$lib timeout 50 $cs --tool $tool --error-exitcode 9 .gpu/bin/tests/kernels/kernels_gpu_test --gtest_filter='ForwardStaged.MatchesReferenceOnEveryVariant:ForwardStaged.RowsGiveTheSameBitsInAMixedLaunch' > $o/cs_$tool.log 2>&1
  echo "$tool rc=$? $(( $(date +%s) - t0 )) s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $o/cs_$tool.log | tail -1)"
done
t0=$(date +%s)
NORMSVC_SERVER_BINARY=$PWD/.gpu/bin/server/normsvc LD_LIBRARY_PATH=$lib timeout 250 .gpu/bin/tests/server/server_test --gtest_output=xml:$o/server_test.xml > $o/server_test.log 2>&1
echo "server_test rc=$? $(( $(date +%s) - t0 )) s"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED' $o/server_test.log | tail -n 12
echo done
