#!/usr/bin/env bash
# Round 42 on the GPU machine (repository root; .gpu bundled from a build of
# main with round42.patch applied: kernels/bench/pack_gpu_bundle.sh build-gpu).
# The whole kernels_gpu_test, then RUNS times (default 2) norm_bench's bf16
# forward table under the staged policy (the segment cases among it).
# Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR [RUNS]}
runs=${2:-2}
source kernels/bench/device_call.sh
call_begin "$out"
bench=$bin/kernels/bench/norm_bench
call_tests "$out" 240 --gtest_filter='*'
for run in $(seq 1 "$runs"); do
  name=table_$run
  timeout 60 $bench --forward-only --dtype bf16 --json "$out/$name.json" >"$out/$name.txt" 2>&1
  echo "$name exit $?: $(grep -E '^(realigned_segments|multi_segment)' "$out/$name.txt" | tr -s ' ' | tr '\n' ';')"
done
call_end "$out"
