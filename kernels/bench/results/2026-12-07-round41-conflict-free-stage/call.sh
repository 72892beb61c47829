#!/usr/bin/env bash
# Round 41: the staged realigning forward reading and writing its stage as
# whole 16-byte slots. Bundle .gpu: the round's build (rounds 39 and 40's
# combined.patch plus round41.patch, sm_90) as kernels/bench/norm_bench and
# the build without round 41 as kernels/bench/norm_bench_base (the tests
# run in the landing call: both binaries with kernels_gpu_test are more
# than a call carries). On the GPU: norm_bench --forward-only at H = 2049,
# 4095 and 8191 (HIDDENS overrides), base and round 41 interleaved RUNS times (default 2), both with
# --realign-stages STAGES (default 2). Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR [RUNS]}
runs=${2:-2}
stages=${STAGES:-2}
source kernels/bench/device_call.sh
call_begin "$out"
echo "stages: $stages" >>"$out/device.txt"
for run in $(seq 1 "$runs"); do
  for hidden in ${HIDDENS:-2049 4095 8191}; do
    for build in base r41; do
      b=$bin/kernels/bench/norm_bench; [[ $build == base ]] && b=${b}_base
      name=${build}_${hidden}_$run
      timeout 60 $b --forward-only --hidden $hidden --realign-stages $stages \
        --json "$out/$name.json" >"$out/$name.txt" 2>&1
      echo "$name exit $?: $(grep -E '^forward ' "$out/$name.txt" | awk '{print $2, $3, $NF}' | tr '\n' ';')"
    done
  done
done
call_end "$out"
