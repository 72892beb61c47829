#!/usr/bin/env bash
# call_land.sh cut to fit about 6 minutes of device time: the whole
# kernels_gpu_test, memcheck and racecheck over the staged kernel's tests,
# then RUNS times (default 2), interleaved, norm_bench --forward-only at
# H = 2049 (the gate) and 33 (rows whose leads differ within a warp) with
# the shifting kernel (the anchor against round 38) and the staged kernel
# at 2 and 3 stages; the bf16 segment tables once, at the end. Writes under
# $1, packs it into $1.tgz. HIDDENS (default "2049 33"), TABLES=0 (no
# segment tables), SANITIZE=0 (no memcheck or racecheck) and TESTS=0 (no
# kernels_gpu_test) cut it further.
set -u
out=${1:?usage: call_land_short.sh OUT_DIR [RUNS]}
runs=${2:-2}
source kernels/bench/device_call.sh
call_begin "$out"
bench=$bin/kernels/bench/norm_bench
if [[ ${TESTS:-1} != 0 ]]; then call_tests "$out" "${TEST_SECONDS:-200}"; fi
if [[ ${SANITIZE:-1} != 0 ]]; then
  call_sanitizers "$out" 'ForwardRealignStaged.Many*:ForwardRealignStaged.Groups*' "${SANITIZER_SECONDS:-50}"
fi
for run in $(seq 1 "$runs"); do
  for hidden in ${HIDDENS:-2049 33}; do
    for variant in shift:2 staged:2 staged:3; do
      IFS=: read policy stages <<<"$variant"
      name=${policy}_s${stages}_${hidden}_$run
      timeout 45 $bench --forward-only --hidden $hidden --realign $policy --realign-stages $stages \
        --json "$out/$name.json" >"$out/$name.txt" 2>&1
      echo "$name exit $?: $(grep -E '^forward ' "$out/$name.txt" | awk '{print $2, $3, $NF}' | tr '\n' ';')"
    done
  done
done
if [[ ${TABLES:-1} != 0 ]]; then call_segment_tables "$out" $bench 1 50; fi
call_end "$out"
