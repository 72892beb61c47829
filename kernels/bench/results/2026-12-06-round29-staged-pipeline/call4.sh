#!/usr/bin/env bash
# Round 29, fourth call: the staged kernel's output of whole chunks in the x
# dtype specialized (op and affine at compile time): kernels_gpu_test, then
# the staged shapes with 5740d1d's norm_bench and this one interleaved twice.
# Writes under $1.
set -uo pipefail
out=${1:?usage: call4.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
lib=$PWD/.gpu/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
LD_LIBRARY_PATH=$lib timeout 200 .gpu/bin/tests/kernels/kernels_gpu_test >"$out/kernels_gpu_test.log" 2>&1
echo "kernels_gpu_test exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED) ' "$out/kernels_gpu_test.log" | tail -n 12
for rep in 1 2; do
  for binary in norm_bench_5740d1d norm_bench; do
    for shape in "fp32 32768" "fp32 65536" "fp32 131072" "fp32 262144" "bf16 196608" "bf16 262144"; do
      set -- $shape
      LD_LIBRARY_PATH=$lib timeout 60 ".gpu/bin/kernels/bench/$binary" --forward-only --dtype "$1" \
        --hidden "$2" 2>&1 | grep -E '^forward' | sed "s/^/r$rep $binary  /" >>"$out/results.txt"
    done
  done
done
wc -l "$out/results.txt"
