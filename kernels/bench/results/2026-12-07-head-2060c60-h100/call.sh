#!/usr/bin/env bash
# HEAD (2060c60, round 42 landed) on the GPU machine, in one call:
# 1. the whole table beside PyTorch (compare_torch.py), owed since 717f919;
# 2. where bf16 256 x 65536 forward (ForwardStagedKernel: rows of 8,192
#    chunks in clusters of two blocks of 512, 8 slots a thread, one row a
#    cluster an iteration) loses its 0.30 of copy: norm_bench over the row
#    count (66 to 1,056 rows: the slope is the steady cost of a row, the
#    intercept the launch's fixed cost), then Nsight Compute on one launch
#    of each op (speed of light, memory, warp states, occupancy and, where
#    this ncu has it, PM sampling: DRAM traffic over the launch's time).
# kernels_gpu_test of this build passed in the call that landed round 42.
# Bundle: kernels/bench/pack_gpu_bundle.sh build-gpu. Writes under $1 and
# packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
bench=$bin/kernels/bench/norm_bench
PYTHONUNBUFFERED=1 timeout 150 python3 kernels/bench/compare_torch.py \
  --bench "$bench" --lib "$LD_LIBRARY_PATH" --out "$out/round.json" >"$out/bench.log" 2>&1
echo "compare_torch exit $?" | tee -a "$out/device.txt"
grep -E "MISS|multi_segment|small " "$out/bench.log" | tr -s ' ' | head -40
for rows in 66 132 256 264 528 1056; do
  timeout 40 $bench --forward-only --dtype bf16 --hidden 65536 --elements $((rows * 65536)) \
    --json "$out/rows_$rows.json" >"$out/rows_$rows.txt" 2>&1
  echo "rows $rows exit $?: $(grep -E '^forward' "$out/rows_$rows.txt" | tr -s ' ' | tr '\n' ';')"
done
NCU=$(ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU" >>"$out/device.txt"
sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats
  --section LaunchStats --section Occupancy --section SchedulerStats"
if $NCU --list-sections 2>/dev/null | grep -q PmSampling; then sections="$sections --section PmSampling"; fi
# norm_bench times LayerNorm first, then RMSNorm, 12 launches each with --iterations 3.
for pick in "ln:3" "rms:15"; do
  IFS=: read name skip <<<"$pick"
  timeout 100 $NCU --clock-control none -k regex:ForwardStagedKernel --launch-skip $skip \
    --launch-count 1 $sections -o "$out/fwd_$name" $bench --forward-only --hidden 65536 \
    --dtype bf16 --iterations 3 >"$out/ncu_$name.txt" 2>&1
  echo "ncu $name exit $?" | tee -a "$out/device.txt"
  timeout 60 $NCU -i "$out/fwd_$name.ncu-rep" --page details >"$out/details_$name.txt" 2>&1
  timeout 60 $NCU -i "$out/fwd_$name.ncu-rep" --page raw --csv >"$out/raw_$name.csv" 2>&1
  gzip -f "$out/raw_$name.csv"
  grep -E "^  void|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Block Limit" \
    "$out/details_$name.txt" | head -12
  rm -f "$out/fwd_$name.ncu-rep"
done
call_end "$out"
