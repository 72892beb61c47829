#!/usr/bin/env bash
# Rounds 39, 40 and 41 in one call, without tests (they run in the landing
# call). Bundle .gpu: kernels/bench/norm_bench of the round 41 build
# (combined.patch of ../2026-12-07-rounds39-40 plus round41.patch) and
# kernels/bench/norm_bench_base of combined.patch alone. RUNS times
# (default 2), interleaved:
# - norm_bench --forward-only at H = 2049, 4095, 8191 (HIDDENS overrides):
#   base at 2, 3 and 4 stages (round 39), round 41 at 2 and 3;
# - base's bf16 forward table (every H, the small-batch and segment cases)
#   as built (the staged kernel for tables of segments: round 40) and with
#   --realign shift (the shifting kernel for everything): round 40 reads
#   realigned_segments' table time from each.
# Writes under $1 and packs it into $1.tgz.
set -u
out=${1:?usage: call_rounds.sh OUT_DIR [RUNS]}
runs=${2:-2}
source kernels/bench/device_call.sh
call_begin "$out"
bench=$bin/kernels/bench
for run in $(seq 1 "$runs"); do
  for hidden in ${HIDDENS:-2049 4095 8191}; do
    for variant in base:2 base:3 base:4 r41:2 r41:3; do
      IFS=: read build stages <<<"$variant"
      b=$bench/norm_bench; [[ $build == base ]] && b=${b}_base
      name=${build}_s${stages}_${hidden}_$run
      timeout 60 $b --forward-only --hidden $hidden --realign-stages $stages \
        --json "$out/$name.json" >"$out/$name.txt" 2>&1
      echo "$name exit $?: $(grep -E '^forward ' "$out/$name.txt" | awk '{print $2, $3, $NF}' | tr '\n' ';')"
    done
  done
  call_segment_tables "$out" $bench/norm_bench_base "$run" 75
done
call_end "$out"
