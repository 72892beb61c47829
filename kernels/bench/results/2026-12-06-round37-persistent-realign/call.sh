#!/usr/bin/env bash
# Round 37: the realigning forward kernel launched persistent (one wave of
# blocks looping over row groups) instead of a block a row group. Bundle:
# kernels/bench/norm_bench_head (717f919, the baseline), kernels/bench/norm_bench
# and tests/kernels/kernels_gpu_test (this build). On the GPU: the whole
# kernels_gpu_test, then norm_bench --forward-only at H = 2049, 4095 and 8191
# of both, interleaved RUNS times (default 2). Writes under $1 and packs it
# into $1.tgz (the loose files are removed: a call returns few files).
set -u
out=${1:?usage: call.sh OUT_DIR [RUNS]}
runs=${2:-2}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
export LD_LIBRARY_PATH=$PWD/.gpu/lib
bin=.gpu/bin
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
timeout 170 $bin/tests/kernels/kernels_gpu_test >"$out/kernels_gpu_test.log" 2>&1
echo "kernels_gpu_test exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED) |tests? ran' "$out/kernels_gpu_test.log" | tail -n 8
# The server's GPU executor tests (this build's server_test; the upload fix
# of the same day and its out-of-memory test).
timeout 120 $bin/tests/server/server_test --gtest_filter='GpuExecutor*:ParameterStore*' \
  >"$out/server_gpu_executor_tests.log" 2>&1
echo "server_test GpuExecutor exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran' "$out/server_gpu_executor_tests.log" | tail -n 8
for run in $(seq 1 "$runs"); do
  for hidden in 2049 4095 8191; do
    for build in norm_bench_head norm_bench; do
      timeout 60 $bin/kernels/bench/$build --forward-only --hidden $hidden \
        --json "$out/${build}_${hidden}_$run.json" >"$out/${build}_${hidden}_$run.txt" 2>&1
      echo "$build $hidden $run exit $?"
      grep -E '^forward ' "$out/${build}_${hidden}_$run.txt" | awk '{print $2, $3, $5, $NF}' | tr '\n' ';'
      echo
    done
  done
done
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
