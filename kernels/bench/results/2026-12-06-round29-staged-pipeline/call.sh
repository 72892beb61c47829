#!/usr/bin/env bash
# Round 29 on the GPU machine, from the repository root, with the bundle in
# .gpu: kernels_gpu_test, then norm_bench --forward-only on each shape with
# the staged pipeline off and on (same binary, interleaved twice), for the
# staged plans of long rows and the tuning experiment's plans (--staged) of
# H = 16384 and 65536 beside the register kernels. Writes under $1.
set -uo pipefail
out=${1:?usage: call.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
lib=$PWD/.gpu/lib
bench=.gpu/bin/kernels/bench/norm_bench
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
LD_LIBRARY_PATH=$lib timeout 240 .gpu/bin/tests/kernels/kernels_gpu_test \
  >"$out/kernels_gpu_test.log" 2>&1
echo "kernels_gpu_test exit $?" >>"$out/device.txt"
grep -E '^\[  (PASSED|FAILED) ' "$out/kernels_gpu_test.log" | tail -n 12
run() {  # run TAG ARGS...: one norm_bench, its table rows appended to results.txt
  local tag=$1; shift
  LD_LIBRARY_PATH=$lib timeout 60 "$bench" --forward-only --iterations 30 "$@" 2>&1 |
    grep -E '^forward' | sed "s/^/$tag  /" >>"$out/results.txt"
}
for rep in 1 2; do
  # Long rows, default plans (staged).
  for shape in "fp32 131072" "fp32 98304" "bf16 262144" "bf16 196608"; do
    set -- $shape
    for pipe in off same-occupancy wherever-they-fit; do
      run "r$rep pipe=$pipe" --dtype "$1" --hidden "$2" --staged_pipeline "$pipe"
    done
  done
  # Register-layout rows: the register kernel, then staged plans off / on.
  for shape in "bf16 65536 8192 512,8 512,4 1024,4" "fp32 65536 16384 512,8 512,4 1024,4" \
               "bf16 16384 2048 512,1 256,2 512,2" "fp32 16384 4096 512,1 512,2 1024,1" \
               "bf16 4096 512 256,1 512,1"; do
    set -- $shape
    run "r$rep register" --dtype "$1" --hidden "$2"
    shape_args=("$@")
    for cfg in "${shape_args[@]:3}"; do
      for pipe in off wherever-they-fit; do
        run "r$rep staged=$cfg pipe=$pipe" --dtype "${shape_args[0]}" \
          --hidden "${shape_args[1]}" --staged "${shape_args[2]},$cfg" --staged_pipeline "$pipe"
      done
    done
  done
done
wc -l "$out/results.txt"
