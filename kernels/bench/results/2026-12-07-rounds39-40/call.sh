#!/usr/bin/env bash
# Rounds 39 and 40 in one build: combined.patch (round 40's staged
# realigning forward for groups of segments, then round 39's stage count on
# top) applied to 72b12fc and built for sm_90, bundled in .gpu with HEAD's
# norm_bench beside it as norm_bench_head. On the GPU: the patched build's
# realigning, segment, early-launch, special-row and batch-invariance tests;
# memcheck and racecheck over the staged kernel's many-row and segment-table
# tests; then, interleaved RUNS times (default 2), norm_bench --forward-only
# at H = 2049, 4095 and 8191 with 2, 3 and 4 stages, and the whole forward
# bf16 table (every H, the small-batch and segment cases) of HEAD and
# of the patch at 2 and 3 stages. Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR [RUNS]}
runs=${2:-2}
source kernels/bench/device_call.sh
call_begin "$out"
call_tests "$out" 150 --gtest_filter='ForwardRealign*:ForwardSegment*:ForwardEarlyLaunch*:*Special*:*BatchInvariance*'
call_sanitizers "$out" 'ForwardRealignStaged.Many*:ForwardRealignStaged.Groups*' 100
summary() { grep -E '^(forward|realigned_segments) ' "$1" | awk '{print $2, $3, $5, $NF}' | tr '\n' ';'; echo; }
for run in $(seq 1 "$runs"); do
  for hidden in ${HIDDENS:-2049 4095 8191}; do
    for stages in 2 3 4; do
      name=s${stages}_${hidden}_$run
      timeout 60 $bin/kernels/bench/norm_bench --forward-only --hidden $hidden \
        --realign-stages $stages --json "$out/$name.json" >"$out/$name.txt" 2>&1
      echo "stages $stages $hidden $run exit $?"; summary "$out/$name.txt"
    done
  done
  for build in head s2 s3; do
    name=table_${build}_$run
    case $build in
      head) cmd=($bin/kernels/bench/norm_bench_head --forward-only --dtype bf16) ;;
      s2) cmd=($bin/kernels/bench/norm_bench --forward-only --dtype bf16 --realign-stages 2) ;;
      s3) cmd=($bin/kernels/bench/norm_bench --forward-only --dtype bf16 --realign-stages 3) ;;
    esac
    timeout 75 "${cmd[@]}" --json "$out/$name.json" >"$out/$name.txt" 2>&1
    echo "$name exit $?"; grep -E '^realigned_segments ' "$out/$name.txt"
  done
done
call_end "$out"
