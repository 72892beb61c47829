#!/usr/bin/env bash
# The review's added GPU tests (the wide column reduction's launch counter and guard
# floats, 16-bit partial stores of whole and straddling warps) with the
# backward early-launch and options tests. Writes under $1.
set -u
out=${1:?}
mkdir -p "$out"
tar -C .gpu -xJf .gpu/bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
timeout 150 .gpu/bin/tests/kernels/kernels_gpu_test --gtest_filter='BackwardColumnReduction.*:BackwardPartials.*:BackwardEarlyLaunch.*:BackwardOptions.*' >"$out/tests.log" 2>&1
echo "tests exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED|       OK) |tests? ran' "$out/tests.log" | tail -n 12
