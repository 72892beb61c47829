#!/usr/bin/env bash
# Two words a thread for 16-bit realigned rows (bf16 H = 2049: 160 threads
# a row instead of 288): norm_bench_b is norm_bench linked with a
# launch_plan.cc whose PlanBackwardRealign gives one slot only up to 256
# words (`words <= 256 ? 1 : kBackwardRealignMaxSlots`), the kernels being
# the same; A/B against the committed plan and the strided kernel, then
# Nsight Compute on both (a-two-words/).
tar -C .gpu -xJf .gpu/bundle.tar.xz; xz -d .gpu/norm_bench_b.xz; chmod +x .gpu/norm_bench_b
export LD_LIBRARY_PATH=$PWD/.gpu/lib
r=$OUT/r; mkdir -p $r
A=.gpu/bin/kernels/bench/norm_bench; B=.gpu/norm_bench_b
for rep in 1 2 3; do
  for v in a:$A:on b:$B:on off:$A:off; do
    IFS=: read name bin mode <<< "$v"
    timeout 60 $bin --backward-only --hidden 2049 --backward-realign $mode --json $r/ab_${name}_$rep.json > $r/ab_${name}_$rep.txt 2>&1
  done
done
N=/opt/nvidia/nsight-compute/2025.3.1/ncu
for v in a:$A b:$B; do
  IFS=: read name bin <<< "$v"
  timeout 120 $N --clock-control none -k regex:BackwardRealign --launch-skip 3 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --section SchedulerStats --section InstructionStats $bin --backward-only --hidden 2049 --dtype bf16 --iterations 3 > $r/ncu_$name.txt 2>&1
done
tar czf $OUT/r.tgz -C $OUT r
