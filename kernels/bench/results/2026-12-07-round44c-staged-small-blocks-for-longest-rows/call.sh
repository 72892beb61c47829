#!/usr/bin/env bash
# Round 44c on the GPU machine: the whole kernels_gpu_test of the patched
# build, then norm_bench's staged long rows with the base build's kernels
# library (.gpu/base/libnormsvc_kernels.so, same ABI) and with the patched
# one, interleaved twice. Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
bench=$bin/kernels/bench/norm_bench
call_tests "$out" 240 --gtest_filter='*'
if [[ ! -f .gpu/base/libnormsvc_kernels.so ]]; then xz -d -c .gpu/base/.gpu-base.so.xz >.gpu/base/libnormsvc_kernels.so; fi
patched_lib=$LD_LIBRARY_PATH
for run in 1 2; do
  for build in base patched; do
    lib=$patched_lib
    [[ $build == base ]] && lib=$PWD/.gpu/base:$patched_lib
    for shape in "fp32 65536 256" "fp32 49152 341" "bf16 131072 128" "bf16 98304 170" \
      "bf16 65536 256" "fp32 32768 512"; do
      read -r dtype hidden rows <<<"$shape"
      name=${build}_${dtype}_${hidden}_$run
      LD_LIBRARY_PATH=$lib timeout 40 "$bench" --forward-only --dtype "$dtype" --hidden "$hidden" \
        --elements $((rows * hidden)) --json "$out/$name.json" >"$out/$name.txt" 2>&1
      echo "$name exit $?: $(grep -E '^forward' "$out/$name.txt" | awk '{print $2, $(NF-7), $(NF-5), $(NF-4), $NF}' | tr '\n' ' ')"
    done
  done
done
call_end "$out"
