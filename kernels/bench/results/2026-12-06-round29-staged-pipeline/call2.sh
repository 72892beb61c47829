#!/usr/bin/env bash
# Round 29, second call: the staged layout with eight chunks a thread
# (128 bytes of x in flight a thread) in smaller clusters or blocks, against
# the register kernels, pipeline off; interleaved twice. Writes under $1.
set -uo pipefail
out=${1:?usage: call2.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
lib=$PWD/.gpu/lib
bench=.gpu/bin/kernels/bench/norm_bench
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
run() {  # run TAG ARGS...: one norm_bench, its table rows appended to results.txt
  local tag=$1; shift
  LD_LIBRARY_PATH=$lib timeout 60 "$bench" --forward-only --iterations 30 "$@" 2>&1 |
    grep -E '^forward' | sed "s/^/$tag  /" >>"$out/results.txt"
}
for rep in 1 2; do
  for shape in "bf16 65536 8192 512,2 256,4 1024,1 512,1" \
               "fp32 65536 16384 512,4 512,3 1024,2 256,8" \
               "bf16 131072 16384 512,4 1024,2 256,8" \
               "fp32 32768 8192 512,2 256,4" \
               "bf16 16384 2048 256,1 128,2" \
               "fp32 16384 4096 512,1 256,2" \
               "bf16 8192 1024 128,1" "fp32 8192 2048 256,1"; do
    set -- $shape
    shape_args=("$@")
    run "r$rep register" --dtype "$1" --hidden "$2"
    for cfg in "${shape_args[@]:3}"; do
      run "r$rep staged=$cfg" --dtype "${shape_args[0]}" --hidden "${shape_args[1]}" \
        --staged "${shape_args[2]},$cfg" --staged_pipeline off
    done
  done
done
wc -l "$out/results.txt"
