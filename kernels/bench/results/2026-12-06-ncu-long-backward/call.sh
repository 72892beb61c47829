#!/usr/bin/env bash
# Nsight Compute on the backward of long rows (bf16 LayerNorm 1024 x 16384
# and 256 x 65536, fp32 LayerNorm 256 x 65536): the row kernel with stall
# reasons, the column reduction's duration; norm_bench with and without the
# partials (--backward-dx-only) at those H; then racecheck over the staged
# forward tests with room to finish. Writes under $1.
set -u
out=${1:?usage: call.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
export LD_LIBRARY_PATH=$PWD/.gpu/lib
B=.gpu/bin/kernels/bench/norm_bench
NCU=$(ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; echo "ncu: $NCU"; } >"$out/device.txt" 2>&1
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section SourceCounters"
for v in bf16:16384 bf16:65536 fp32:65536; do
  IFS=: read dtype hidden <<<"$v"
  name=${dtype}_$hidden
  timeout 90 $NCU --clock-control none -k regex:Backward --launch-skip 3 --launch-count 1 $S \
    $B --backward-only --hidden $hidden --dtype $dtype --iterations 3 >"$out/ncu_$name.txt" 2>&1
  echo "== $name rc=$?"
  grep -E "^  void|Duration|DRAM Throughput|Issued Warp Per Scheduler|No Eligible|Achieved Occupancy|Registers Per|Warp Cycles Per Issued" "$out/ncu_$name.txt" | head -12
  timeout 60 $NCU --clock-control none -k regex:ColumnReduce --launch-skip 3 --launch-count 1 --section SpeedOfLight \
    $B --backward-only --hidden $hidden --dtype $dtype --iterations 3 >"$out/ncu_reduce_$name.txt" 2>&1
  grep -E "^  void|^  [A-Za-z]+ColumnReduce|Duration|DRAM Throughput" "$out/ncu_reduce_$name.txt" | head -4
  for mode in --backward-only --backward-dx-only; do
    timeout 40 $B $mode --hidden $hidden --dtype $dtype | grep -E "^backward" | sed "s/^/$mode /" | tee -a "$out/dx_only.txt"
  done
done
timeout 240 /usr/local/cuda/bin/compute-sanitizer --tool racecheck .gpu/bin/tests/kernels/kernels_gpu_test \
  --gtest_filter='ForwardStaged.*' >"$out/racecheck.log" 2>&1
echo "racecheck exit $?: $(grep -E 'RACECHECK SUMMARY' "$out/racecheck.log" | tail -n 1)" | tee -a "$out/device.txt"
grep -E "^\[  (PASSED|FAILED)|OK \]" "$out/racecheck.log"
