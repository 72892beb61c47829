#!/usr/bin/env bash
# HEAD with round 48 (the column reductions drop their partials from H =
# 4096) on the GPU machine: the whole kernels_gpu_test (the discard test in
# its fixed form among them), the table beside PyTorch (compare_torch.py),
# then server_test against the bundled normsvc (its GPU executor runs the
# backward too). Bundle: kernels/bench/pack_gpu_bundle.sh build-gpu .gpu/h48
# tests/kernels/kernels_gpu_test kernels/bench/norm_bench
# tests/server/server_test server/normsvc. Writes under $1, packs it into
# $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
call_use_bundle .gpu/h48
call_tests "$out" 200 --gtest_filter='*'
grep -E "^floats of droppable" "$out/kernels_gpu_test.log" | tee -a "$out/device.txt"
PYTHONUNBUFFERED=1 timeout 170 python3 kernels/bench/compare_torch.py \
  --bench "$bin/kernels/bench/norm_bench" --lib "$LD_LIBRARY_PATH" --out "$out/round.json" \
  >"$out/bench.log" 2>&1
echo "compare_torch exit $?" | tee -a "$out/device.txt"
grep -E "MISS|multi_segment|small " "$out/bench.log" | tr -s ' ' | head -40
NORMSVC_SERVER_BINARY=$PWD/$bin/server/normsvc timeout 200 $bin/tests/server/server_test \
  >"$out/server_test.log" 2>&1
echo "server_test exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/server_test.log" | tail -n 6
call_end "$out"
