#!/usr/bin/env bash
# Rounds 49 and 50 on the GPU machine (an H200), one binary: the
# parameter-staging tests, then norm_bench --forward-only under
# --param_staging one-wave (the default), persistent (round 49) and
# every-launch (round 50), interleaved twice; then the ring kernel on every
# plan it accepts (--ring every-plan) against the default, interleaved twice.
# Bundle: README.md (.gpu/r50). Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
call_use_bundle .gpu/r50
call_tests "$out" 120 --gtest_filter='ForwardParamStaging.*'
for run in 1 2; do
  for staging in one-wave persistent every-launch; do
    name=forward_${staging}_$run
    timeout 90 "$bin/kernels/bench/norm_bench" --forward-only --param_staging $staging \
      --json "$out/$name.json" >"$out/$name.txt" 2>&1
    echo "$name exit $?" | tee -a "$out/device.txt"
  done
done
column() { awk '$1=="forward"{print $NF}' "$out/$1.txt"; }
paste <(awk '$1=="forward"{print $2, $3, $5}' "$out/forward_one-wave_1.txt") \
  <(column forward_one-wave_1) <(column forward_persistent_1) <(column forward_every-launch_1) \
  <(column forward_one-wave_2) <(column forward_persistent_2) <(column forward_every-launch_2) |
  tee "$out/summary.txt"
for run in 1 2; do
  for ring in two-block-clusters every-plan; do
    name=ring_${ring}_$run
    timeout 90 "$bin/kernels/bench/norm_bench" --forward-only --ring $ring \
      --json "$out/$name.json" >"$out/$name.txt" 2>&1
    echo "$name exit $?" | tee -a "$out/device.txt"
  done
done
paste <(awk '$1=="forward"{print $2, $3, $5, $6}' "$out/ring_every-plan_1.txt") \
  <(column ring_two-block-clusters_1) <(column ring_every-plan_1) \
  <(column ring_two-block-clusters_2) <(column ring_every-plan_2) | tee "$out/ring_summary.txt"
call_end "$out"
