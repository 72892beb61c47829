#!/usr/bin/env bash
# Rounds 39-41 tested and measured from one build (combined.patch of
# ../2026-12-07-rounds39-40 plus round41.patch), when one call is all there
# is: bundle .gpu with its tests/kernels/kernels_gpu_test and
# kernels/bench/norm_bench. The whole kernels_gpu_test, memcheck and
# racecheck over the staged kernel's tests, then RUNS times (default 2),
# interleaved: norm_bench --forward-only at H = 2049, 4095, 8191 and 33
# (rows of a few threads, several rows a warp, whose leads differ) with
# --realign shift (the shifting kernel, which rounds 39-41 leave as it is:
# the anchor against round 38's run of the same shapes) and with the staged
# kernel at 2 and 3 stages; and the bf16 table under each policy (the
# segment case's table time, round 40). TEST_FILTER narrows the test run
# (default: all), TEST_SECONDS and SANITIZER_SECONDS bound it; TESTS=0,
# SANITIZE=0 and TABLES=0 leave out the tests, the sanitizers and the
# tables, for a call with little device time (with HIDDENS=2049, RUNS 2 and
# all three off, about a minute). Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call_land.sh OUT_DIR [RUNS]}
runs=${2:-2}
source kernels/bench/device_call.sh
call_begin "$out"
bench=$bin/kernels/bench/norm_bench
if [[ ${TESTS:-1} != 0 ]]; then
  call_tests "$out" "${TEST_SECONDS:-240}" --gtest_filter="${TEST_FILTER:-*}"
fi
if [[ ${SANITIZE:-1} != 0 ]]; then
  call_sanitizers "$out" 'ForwardRealignStaged.Many*:ForwardRealignStaged.Groups*' "${SANITIZER_SECONDS:-80}"
fi
for run in $(seq 1 "$runs"); do
  for hidden in ${HIDDENS:-2049 4095 8191 33}; do
    for variant in shift:2 staged:2 staged:3; do
      IFS=: read policy stages <<<"$variant"
      name=${policy}_s${stages}_${hidden}_$run
      timeout 45 $bench --forward-only --hidden $hidden --realign $policy --realign-stages $stages \
        --json "$out/$name.json" >"$out/$name.txt" 2>&1
      echo "$name exit $?: $(grep -E '^forward ' "$out/$name.txt" | awk '{print $2, $3, $NF}' | tr '\n' ';')"
    done
  done
  if [[ ${TABLES:-1} != 0 ]]; then call_segment_tables "$out" $bench "$run" 60; fi
done
call_end "$out"
