#!/usr/bin/env bash
# Round 36: saved statistics a batch of rows at a time. Bundle:
# kernels/bench/norm_bench_f904 (f904d44, the baseline), kernels/bench/norm_bench
# and tests/kernels/kernels_gpu_test (this build). On the GPU: the backward
# tests, then norm_bench --backward-only of both, bf16 then fp32, interleaved
# RUNS times (the second argument, default 2). Writes under $1 and packs it
# into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR [RUNS]}
runs=${2:-2}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
export LD_LIBRARY_PATH=$PWD/.gpu/lib
bin=.gpu/bin
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
timeout 200 $bin/tests/kernels/kernels_gpu_test --gtest_filter='Backward*:AllDtypes/BackwardMatrix.*' \
  >"$out/backward_tests.log" 2>&1
echo "backward tests exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED) |tests? ran' "$out/backward_tests.log" | tail -n 6
for run in $(seq 1 "$runs"); do
  for dtype in bf16 fp32; do
    for build in norm_bench_f904 norm_bench; do
      timeout 60 $bin/kernels/bench/$build --backward-only --dtype $dtype \
        --json "$out/${build}_${dtype}_$run.json" >"$out/${build}_${dtype}_$run.txt" 2>&1
      echo "$build $dtype $run exit $?"
      grep -E '^backward' "$out/${build}_${dtype}_$run.txt" | awk '{print $2, $3, $5, $NF}' | tr '\n' ';'
      echo
    done
  done
done
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
