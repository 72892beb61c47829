#!/usr/bin/env bash
# The build without the 3- and 4-stage realigning instances, on the GPU
# machine: the whole kernels_gpu_test, server_test's GPU cases, then bf16
# 256 x 65536 forward with gamma and beta, gamma only and no affine (what
# the parameters' L2 reads cost the staged kernel). Bundle:
# kernels/bench/pack_gpu_bundle.sh build-gpu. Writes under $1, packs it
# into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
bench=$bin/kernels/bench/norm_bench
call_tests "$out" 200 --gtest_filter='*'
NORMSVC_SERVER_BINARY=$PWD/$bin/server/normsvc timeout 150 $bin/tests/server/server_test \
  --gtest_filter='*cuda*:Gpu*' >"$out/server_test.log" 2>&1
echo "server_test *cuda*:Gpu* exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran' "$out/server_test.log" | tail -n 6
gzip -f "$out/server_test.log"
for run in 1 2; do
  for affine in full gamma none; do
    name=affine_${affine}_$run
    timeout 40 $bench --forward-only --dtype bf16 --hidden 65536 --affine $affine \
      --json "$out/$name.json" >"$out/$name.txt" 2>&1
    echo "$name exit $?: $(grep -E '^forward' "$out/$name.txt" | awk '{print $2, $(NF-4), $NF}' | tr '\n' ' ')"
  done
done
call_end "$out"
