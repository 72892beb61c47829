#!/usr/bin/env bash
# HEAD with round 50 (the parameters staged in long launches by default):
# the whole kernels_gpu_test, then server_test against the bundled normsvc.
# About 6 minutes on an H100 (kernels_gpu_test 280 s there, server_test 75 s).
# Bundle: kernels/bench/pack_gpu_bundle.sh build-gpu .gpu/h50
# tests/kernels/kernels_gpu_test tests/server/server_test server/normsvc
# kernels/bench/norm_bench at the commit "Round 50 after review". Writes under $1,
# packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
call_use_bundle .gpu/h50
call_tests "$out" 420 --gtest_filter='*'
NORMSVC_SERVER_BINARY=$PWD/$bin/server/normsvc timeout 150 $bin/tests/server/server_test \
  >"$out/server_test.log" 2>&1
echo "server_test exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/server_test.log" | tail -n 6
call_end "$out"
