#!/usr/bin/env bash
# Rounds 39 and 40 with the review's mends, without round 41 (rounds39-41.patch
# of ../2026-12-07-round41-conflict-free-stage less its round41.patch), tested
# and measured from one build: bundle .gpu with tests/kernels/kernels_gpu_test
# and kernels/bench/norm_bench. The whole kernels_gpu_test, memcheck and
# racecheck over the staged kernel's tests, then RUNS times (default 2),
# interleaved: norm_bench --forward-only at H = 2049, 4095, 8191 and 33
# with the shifting kernel (the anchor) and the staged kernel at 2 stages,
# and the bf16 table under each policy (the realigned_segments cases).
# Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR [RUNS]}
runs=${2:-2}
source kernels/bench/device_call.sh
call_begin "$out"
bench=$bin/kernels/bench/norm_bench
call_tests "$out" 240 --gtest_filter='*'
call_sanitizers "$out" 'ForwardRealignStaged.Many*:ForwardRealignStaged.Groups*' 80
for run in $(seq 1 "$runs"); do
  for hidden in 2049 4095 8191 33; do
    for policy in shift staged; do
      name=${policy}_${hidden}_$run
      timeout 45 $bench --forward-only --hidden $hidden --realign $policy \
        --json "$out/$name.json" >"$out/$name.txt" 2>&1
      echo "$name exit $?: $(grep -E '^forward ' "$out/$name.txt" | awk '{print $2, $3, $NF}' | tr '\n' ';')"
    done
  done
  call_segment_tables "$out" $bench "$run" 60
done
call_end "$out"
