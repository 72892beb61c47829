#!/usr/bin/env bash
# Round 42b on the GPU machine: the whole kernels_gpu_test, then memcheck
# over the batch-invariance tests. Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
call_tests "$out" 240 --gtest_filter='*'
call_sanitizers "$out" 'ForwardBatchInvariance.*' 120
call_end "$out"
