#!/usr/bin/env bash
# Round 26: kernels_gpu_test, memcheck over the realigning forward's tests,
# norm_bench at H = 2049 / 4095 / 8191 of HEAD and of the change interleaved,
# ncu of bf16 LayerNorm 2049.
set -u
T0=$(date +%s)
( tar -C .gpu-h2 -xJf .gpu-h2/bundle.tar.xz ) & ( tar -C .gpu-r25 -xJf .gpu-r25/bundle.tar.xz ) & wait
o=$OUT/c4; mkdir -p $o
finish() { tar czf $OUT/c4.tgz -C $OUT c4; echo "tarred at $(($(date +%s)-T0)) s"; }
trap finish EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; date -u; } > $o/device.txt 2>&1; cat $o/device.txt
L=$PWD/.gpu-h2/lib; H=.gpu-h2/bin; N=.gpu-r25/bin
for r in 1 2; do for v in head r26; do
  bin=$H/kernels/bench/norm_bench; [ $v = r26 ] && bin=$N/kernels/bench/norm_bench
  for h in 2049 4095 8191; do
    LD_LIBRARY_PATH=$L timeout 60 $bin --forward-only --hidden $h --json $o/${v}_${h}_$r.json > $o/${v}_${h}_$r.txt 2>&1
  done; echo "$v $r done at $(($(date +%s)-T0)) s"; done; done
for h in 2049 4095 8191; do for v in head r26; do for r in 1 2; do grep -h "^forward" $o/${v}_${h}_$r.txt | awk -v v=$v '{print $2,$3,$5,v,$NF}'; done; done; done | sort -k1,3 -k4 | awk '{k=$1" "$2" "$3; a[k]=a[k]" "$4":"$5} END{for(k in a) print k, a[k]}' | sort
NCU=$(ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
S="--section SpeedOfLight --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis --section InstructionStats"
LD_LIBRARY_PATH=$L timeout 60 $NCU --clock-control none -k regex:ForwardRealign --launch-skip 3 --launch-count 1 $S \
  $N/kernels/bench/norm_bench --forward-only --hidden 2049 --dtype bf16 --iterations 3 > $o/ncu_2049_r26.txt 2>&1
grep -E "Duration|L2 Cache Throughput|Issued Warp Per Scheduler|Executed Instructions  |Local Memory Spilling Req" $o/ncu_2049_r26.txt | head -8
LD_LIBRARY_PATH=$L timeout 200 $N/tests/kernels/kernels_gpu_test > $o/kernels_gpu_test_r26.log 2>&1
echo "kernels_gpu_test r26 rc=$? at $(($(date +%s)-T0)) s"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED  \]' $o/kernels_gpu_test_r26.log | tail -8
CS=$(ls /usr/local/cuda/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
LD_LIBRARY_PATH=$L timeout 120 $CS --tool memcheck $N/tests/kernels/kernels_gpu_test --gtest_filter='ForwardRealign*:ForwardEarlyLaunch*:*Special*' > $o/memcheck_r26.log 2>&1
echo "memcheck rc=$? at $(($(date +%s)-T0)) s"; grep -E "ERROR SUMMARY|PASSED|FAILED" $o/memcheck_r26.log | tail -5
echo "end at $(($(date +%s)-T0)) s"
LD_LIBRARY_PATH=$L timeout 90 $CS --tool racecheck $N/tests/kernels/kernels_gpu_test --gtest_filter='ForwardRealign.FewRows:ForwardRealign.InPlace' > $o/racecheck_r26.log 2>&1
echo "racecheck rc=$? at $(($(date +%s)-T0)) s"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $o/racecheck_r26.log | tail -5
