#!/usr/bin/env bash
# Round 35b: one chunk a thread for RMSNorm's 16-bit cluster rows only (H =
# 8,200-32,768), with round 34b's ring kernels (one an op) in the same
# build. Bundle: kernels/bench/norm_bench_r33 (838fa99, the baseline),
# kernels/bench/norm_bench and tests/kernels/kernels_gpu_test (this build).
# On the GPU: the whole kernels_gpu_test, memcheck over the 16-bit partial
# stores' test (RMSNorm rows of 8200 and 16392 on the new plan), then
# norm_bench --backward-only --dtype bf16 of both interleaved twice. Writes
# under $1 and packs it into $1.tgz.
set -u
out=${1:?usage: call_rms.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
export LD_LIBRARY_PATH=$PWD/.gpu/lib
bin=.gpu/bin
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
timeout 250 $bin/tests/kernels/kernels_gpu_test >"$out/kernels_gpu_test.log" 2>&1
echo "kernels_gpu_test exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran' "$out/kernels_gpu_test.log" | tail -n 8
timeout 100 /usr/local/cuda/bin/compute-sanitizer --tool memcheck $bin/tests/kernels/kernels_gpu_test \
  --gtest_filter='BackwardPartials.*' >"$out/memcheck.log" 2>&1
echo "memcheck exit $?: $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -n 1)" | tee -a "$out/device.txt"
for run in 1 2; do
  for build in norm_bench_r33 norm_bench; do
    timeout 60 $bin/kernels/bench/$build --backward-only --dtype bf16 --json "$out/${build}_$run.json" \
      >"$out/${build}_$run.txt" 2>&1
    echo "$build $run exit $?"
    grep -E '^backward .* (8192|16384|65536) ' "$out/${build}_$run.txt"
  done
done
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
