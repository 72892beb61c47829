#!/usr/bin/env bash
# Round 20, seventh call: the backward GPU tests after review: the
# realigned test widened (fp32 one slot and two rows a block, dx alone
# without gamma, dgamma or dbeta alone, dx off x's offset: the strided
# fallback) and every RunAndCheck case checking that no dx byte outside
# the rows is written.
set -u
tar -C .gpu -xJf .gpu/bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } > $r/device.txt 2>&1
timeout 150 .gpu/bin/tests/kernels/kernels_gpu_test --gtest_filter='Backward*' > $r/backward_tests.log 2>&1
echo "rc=$?"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran|Failure|stray|outside' $r/backward_tests.log | head -20
date -u >> $r/device.txt
