#!/usr/bin/env bash
# Round 51 on the GPU machine: LayerNorm's gamma/beta loaded a chunk ahead in
# the one-segment lean kernel (round51.patch). The forward tests with the
# patched library, then norm_bench --forward-only of the base library
# (.gpu/base, HEAD's) and the patched one interleaved twice, one binary.
# Bundles (here): xz -c build-gpu/kernels/libnormsvc_kernels.so >
# .gpu/base/.gpu-base.so.xz at HEAD; then git apply round51.patch, build,
# kernels/bench/pack_gpu_bundle.sh build-gpu .gpu/l51
# tests/kernels/kernels_gpu_test kernels/bench/norm_bench. Carry .gpu/l51 and
# .gpu/base. Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
call_ab_bundle .gpu/l51
call_tests "$out" 200 \
  --gtest_filter='AllDtypes/ForwardMatrix.*:ForwardBatchInvariance.*:ForwardOptions.*:ForwardSpecialRows.*:ForwardParamStaging.*'
call_forward_table_ab "$out" forward
call_end "$out"
