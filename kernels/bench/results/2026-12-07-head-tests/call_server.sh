#!/usr/bin/env bash
# HEAD's server on the GPU machine: server_test against the bundled normsvc
# (the CUDA executor; the backward's budget reservation and the stream
# drain of 2026-12-07 evening), then memcheck over the new kernel tests
# (launch validation, the long rows capped at 65,536 elements a case).
# Bundle: as call.sh's (.gpu/ht). Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call_server.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
call_use_bundle .gpu/ht
NORMSVC_SERVER_BINARY=$PWD/$bin/server/normsvc timeout 240 $bin/tests/server/server_test \
  >"$out/server_test.log" 2>&1
echo "server_test exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/server_test.log" | tail -n 6
NORMSVC_TEST_MAX_ELEMENTS=65536 timeout 150 "$sanitizer" --tool memcheck --error-exitcode 9 \
  $bin/tests/kernels/kernels_gpu_test \
  --gtest_filter='LaunchValidation.*:LongRows.*:BackwardSpecialRows.*' >"$out/memcheck.log" 2>&1
echo "memcheck exit $? ($(grep -cE '^========= (Invalid|Error)' "$out/memcheck.log") reports)" \
  | tee -a "$out/device.txt"
call_end "$out"
