#!/usr/bin/env bash
# Round 46 on the GPU machine: the whole kernels_gpu_test of the patched
# build (.gpu/r46: pack_gpu_bundle.sh build-gpu .gpu/r46
# tests/kernels/kernels_gpu_test kernels/bench/norm_bench), memcheck over
# the realigning and batch-invariance tests, then norm_bench forward with
# the base commit's kernels library (.gpu/base/.gpu-base.so.xz, same ABI)
# and the patched one interleaved twice: the realigned H the change
# touches and two it must leave alone. Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
call_ab_bundle .gpu/r46
call_tests "$out" 240 --gtest_filter='*'
call_sanitizers "$out" 'ForwardRealign*:ForwardBatchInvariance.*:ForwardSpecial*' 150
call_forward_ab "$out" r46 "bf16 2049" "fp32 2049" "bf16 4095" "bf16 8191" "bf16 4096" "fp32 16384"
call_end "$out"
