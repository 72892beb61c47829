#!/usr/bin/env bash
# Round 20, third call: Nsight Compute on the realigned backward (bf16
# LayerNorm 8189 x 2049), both versions, and on the staged backward of
# bf16 LayerNorm 4096 x 4096 for comparison.
set -u
tar -C .gpu -xJf .gpu/bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
r=$OUT/r; mkdir -p $r
B=.gpu/bin/kernels/bench/norm_bench
A=.gpu/bin/kernels/bench/norm_bench_r20a
NCU=$(ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section SourceCounters"
for v in first:$A:2049:BackwardRealign ring:$B:2049:BackwardRealign staged4096:$B:4096:BackwardStaged; do
  IFS=: read name bin hidden kernel <<< "$v"
  echo "== $name"; date -u
  timeout 150 $NCU --clock-control none -k regex:$kernel --launch-skip 3 --launch-count 1 $S $bin --backward-only --hidden $hidden --dtype bf16 --iterations 3 > $r/ncu_$name.txt 2>&1
  echo "rc=$?"
  grep -E "Duration|Memory Throughput|DRAM Throughput|Issued Warp Per Scheduler|No Eligible|Eligible Warps|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Stall|stall" $r/ncu_$name.txt | head -40
done
tar czf $OUT/r.tgz -C $OUT r
