#!/usr/bin/env bash
# Round 29, fifth call: 16-bit rows past two register blocks staged like the
# fp32 ones (a trial build: StagesClusterRow for every dtype) against ce0d746
# (norm_bench_head): kernels_gpu_test of the trial, then both benchmarks on
# the shapes the trial changes, interleaved twice. Writes under $1.
set -uo pipefail
out=${1:?usage: call5.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
lib=$PWD/.gpu/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
LD_LIBRARY_PATH=$lib timeout 150 .gpu/bin/tests/kernels/kernels_gpu_test \
  --gtest_filter='ForwardStaged*:ForwardRing*:*ForwardMatrix*:ForwardSpecialRows*:ForwardBatchInvariance*' >"$out/kernels_gpu_test.log" 2>&1
echo "kernels_gpu_test exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED) ' "$out/kernels_gpu_test.log" | tail -n 12
for rep in 1 2; do
  for binary in norm_bench_head norm_bench; do
    for hidden in 40960 65536 131072; do
      LD_LIBRARY_PATH=$lib timeout 60 ".gpu/bin/kernels/bench/$binary" --forward-only --dtype bf16 \
        --hidden "$hidden" 2>&1 | grep -E '^forward' | sed "s/^/r$rep $binary  /" >>"$out/results.txt"
    done
  done
done
cat "$out/results.txt"
