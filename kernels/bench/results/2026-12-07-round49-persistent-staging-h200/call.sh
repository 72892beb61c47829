#!/usr/bin/env bash
# Round 49 on the GPU machine (an H200): round 24's persistent parameter
# staging (gamma/beta staged in shared memory once a block, the blocks
# looping over row groups) rebuilt on HEAD, A/B in one binary: the
# parameter-staging tests, then norm_bench --forward-only with
# --param_staging one-wave (the default) and persistent, interleaved twice;
# then the ring kernel for every plan it accepts (--ring every-plan) against
# the default policy, interleaved twice (round 9's H200 verdict on in-block
# rows predates rounds 34 and 47).
# Bundle: apply round49.patch, build, then kernels/bench/pack_gpu_bundle.sh
# build-gpu .gpu/r49 tests/kernels/kernels_gpu_test kernels/bench/norm_bench.
# Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
call_use_bundle .gpu/r49
call_tests "$out" 120 --gtest_filter='ForwardParamStaging.*:AllDtypes/ForwardMatrix.*'
for run in 1 2; do
  for staging in one-wave persistent; do
    name=forward_${staging}_$run
    timeout 90 "$bin/kernels/bench/norm_bench" --forward-only --param_staging $staging \
      --json "$out/$name.json" >"$out/$name.txt" 2>&1
    echo "$name exit $?" | tee -a "$out/device.txt"
  done
done
paste <(awk '$1=="forward"{print $2, $3, $5}' "$out/forward_one-wave_1.txt") \
  <(awk '$1=="forward"{print $NF}' "$out/forward_one-wave_1.txt") \
  <(awk '$1=="forward"{print $NF}' "$out/forward_persistent_1.txt") \
  <(awk '$1=="forward"{print $NF}' "$out/forward_one-wave_2.txt") \
  <(awk '$1=="forward"{print $NF}' "$out/forward_persistent_2.txt") | tee "$out/summary.txt"
for run in 1 2; do
  for ring in two-block-clusters every-plan; do
    name=ring_${ring}_$run
    timeout 90 "$bin/kernels/bench/norm_bench" --forward-only --ring $ring \
      --json "$out/$name.json" >"$out/$name.txt" 2>&1
    echo "$name exit $?" | tee -a "$out/device.txt"
  done
done
paste <(awk '$1=="forward"{print $2, $3, $5, $6}' "$out/ring_every-plan_1.txt") \
  <(awk '$1=="forward"{print $NF}' "$out/ring_two-block-clusters_1.txt") \
  <(awk '$1=="forward"{print $NF}' "$out/ring_every-plan_1.txt") \
  <(awk '$1=="forward"{print $NF}' "$out/ring_two-block-clusters_2.txt") \
  <(awk '$1=="forward"{print $NF}' "$out/ring_every-plan_2.txt") | tee "$out/ring_summary.txt"
call_end "$out"
