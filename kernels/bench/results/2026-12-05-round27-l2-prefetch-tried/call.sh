#!/usr/bin/env bash
# Round 27 on the GPU machine: the forward register kernel asking the L2 for
# the next wave's rows (l2_prefetch.patch applied, built for sm_90 and
# bundled into .gpu-r27 with
#   kernels/bench/pack_gpu_bundle.sh build-gpu .gpu-r27 kernels/bench/norm_bench tests/kernels/kernels_gpu_test
# then run with `carry: [".gpu-r27"]`). The policy is a run-time switch of
# the same binary, so the A/B needs one build: --l2_prefetch off (HEAD's
# behaviour) against next-wave, interleaved three times, after the GPU
# tests (which run with the policy off: a prefetch changes no bit) and a
# memcheck of the benchmark with the policy on.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
tar -C .gpu-r27 -xJf .gpu-r27/bundle.tar.xz
o=$OUT/r27; mkdir -p $o
finish() { tar czf $OUT/r27.tgz -C $OUT r27; echo "tarred at $(el) s"; }
trap finish EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; date -u; } > $o/device.txt 2>&1
cat $o/device.txt
L=$PWD/.gpu-r27/lib; B=.gpu-r27/bin
LD_LIBRARY_PATH=$L timeout 200 $B/tests/kernels/kernels_gpu_test > $o/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? at $(el) s"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED  \]' $o/kernels_gpu_test.log | tail -6
CS=$(ls /usr/local/cuda/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
LD_LIBRARY_PATH=$L timeout 150 $CS --tool memcheck $B/kernels/bench/norm_bench --forward-only --quick \
  --iterations 2 --l2_prefetch next-wave > $o/memcheck.log 2>&1
echo "memcheck rc=$? at $(el) s"; grep -E "ERROR SUMMARY" $o/memcheck.log | tail -2
for r in 1 2 3; do for v in off next-wave; do
  LD_LIBRARY_PATH=$L timeout 70 $B/kernels/bench/norm_bench --forward-only --l2_prefetch $v \
    --json $o/${v}_$r.json > $o/${v}_$r.txt 2>&1
  echo "$v $r rc=$? at $(el) s"
done; done
grep -h '^forward' $o/off_1.txt $o/next-wave_1.txt | awk '{print $2, $3, $5, $NF}' | sort -k1,3 | head -60
# The whole target table with the prefetch on (PyTorch beside it), and the
# issue's reference size (64 M elements) with it off and on.
PYTHONUNBUFFERED=1 timeout 60 python3 kernels/bench/compare_torch.py --bench $B/kernels/bench/norm_bench \
  --lib $L --bench-args "--l2_prefetch next-wave" --out $o/round_next_wave.json > $o/bench_next_wave.log 2>&1
echo "compare_torch rc=$? at $(el) s"; grep -c MISS $o/bench_next_wave.log
for v in off next-wave; do
  LD_LIBRARY_PATH=$L timeout 60 $B/kernels/bench/norm_bench --forward-only --elements 67108864 \
    --l2_prefetch $v --json $o/${v}_64m.json > $o/${v}_64m.txt 2>&1
  echo "$v 64m rc=$? at $(el) s"
done
# What the memory system does with it: bf16 LayerNorm 4096, each policy.
NCU=$(ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for v in off next-wave; do
  LD_LIBRARY_PATH=$L timeout 60 $NCU --clock-control none -k regex:ForwardLean --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
    $B/kernels/bench/norm_bench --forward-only --hidden 4096 --dtype bf16 --iterations 3 --l2_prefetch $v \
    > $o/ncu_ln4096_$v.txt 2>&1
  grep -E "Duration|DRAM Throughput|L2 Hit Rate|No Eligible" $o/ncu_ln4096_$v.txt | head -6
done
echo "end at $(el) s"
