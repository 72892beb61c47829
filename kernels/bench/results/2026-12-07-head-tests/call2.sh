#!/usr/bin/env bash
# The whole kernels_gpu_test of HEAD again, with the time it needs: the
# first call (call.sh, run-h100/) stopped it at 330 s inside
# LongRows.BackwardThousandRowsMatchTheReferenceAndRepeat, whose checks
# walked 1 GB of dx a byte at a time on one thread (now in parallel).
# Bundle: kernels/bench/pack_gpu_bundle.sh build-gpu .gpu/ht2
# tests/kernels/kernels_gpu_test tests/server/server_test server/normsvc
# kernels/bench/norm_bench. Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call2.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
call_use_bundle .gpu/ht2
call_tests "$out" 560 --gtest_filter='*'
grep -E "LongRows|droppable" "$out/kernels_gpu_test.log" | tail -n 6
call_end "$out"
