#!/usr/bin/env bash
# Round 50's rule as built for landing (ParamStaging::kMultiWarpRows, the new
# default): the parameter-staging and dispatch tests and the forward
# matrices (which now stage the parameters of large one-segment launches
# where the rule says), then norm_bench --forward-only, the default against
# one-wave (the old default), interleaved twice, then the table beside
# PyTorch with the new default. Bundle: pack_gpu_bundle.sh build-gpu .gpu/r51
# tests/kernels/kernels_gpu_test kernels/bench/norm_bench at the landing
# build. `short` (for a call with little device time left): the staging and
# dispatch tests and one A/B run, no matrices, no table. Writes under $1,
# packs it into $1.tgz.
set -u
out=${1:?usage: call_land.sh OUT_DIR [short]}
mode=${2:-full}
runs="1 2"
tests='ForwardParamStaging.*:KernelDispatch.*:AllDtypes/ForwardMatrix.*'
if [[ $mode == short ]]; then
  runs=1
  tests='ForwardParamStaging.*:KernelDispatch.*'
fi
source kernels/bench/device_call.sh
call_begin "$out"
call_use_bundle .gpu/r51
call_tests "$out" 200 --gtest_filter="$tests"
for run in $runs; do
  for staging in one-wave multi-warp-rows; do
    name=forward_${staging}_$run
    timeout 90 "$bin/kernels/bench/norm_bench" --forward-only --param_staging $staging \
      --json "$out/$name.json" >"$out/$name.txt" 2>&1
    echo "$name exit $?" | tee -a "$out/device.txt"
  done
done
column() { awk '$1=="forward"{print $NF}' "$out/$1.txt"; }
paste <(awk '$1=="forward"{print $2, $3, $5}' "$out/forward_one-wave_1.txt") \
  <(column forward_one-wave_1) <(column forward_multi-warp-rows_1) | tee "$out/summary.txt"
if [[ $mode == short ]]; then
  call_end "$out"
  exit 0
fi
paste <(column forward_one-wave_2) <(column forward_multi-warp-rows_2) | tee "$out/summary_2.txt"
PYTHONUNBUFFERED=1 timeout 240 python3 kernels/bench/compare_torch.py \
  --bench "$bin/kernels/bench/norm_bench" --lib "$LD_LIBRARY_PATH" --out "$out/round.json" \
  >"$out/bench.log" 2>&1
echo "compare_torch exit $?" | tee -a "$out/device.txt"
grep -E "MISS|multi_segment|small " "$out/bench.log" | tr -s ' ' | head -40
call_end "$out"
