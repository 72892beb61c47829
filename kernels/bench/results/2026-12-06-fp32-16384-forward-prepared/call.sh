#!/usr/bin/env bash
# Prepared (not yet run): why fp32 LayerNorm forward at H = 16384 (the ring
# kernel, clusters of two blocks) runs at 0.79 of copy on an H100 against
# RMSNorm's 0.91, a gap six times the in-block rows' (fp32 8192: 0.953 /
# 0.978). Nsight Compute on ForwardRingKernel<float, float> for each op
# (stall reasons, instructions, occupancy), and norm_bench with
# --ring off (the lean kernel on the same plan) and --affine gamma|none, to
# split the statistic's cost from beta's. Bundle norm_bench only. Writes
# under $1 and packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
export LD_LIBRARY_PATH=$PWD/.gpu/lib
B=.gpu/bin/kernels/bench/norm_bench
NCU=$(ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats --section SourceCounters"
# norm_bench runs LayerNorm then RMSNorm: 9 warm-up and 10 timed launches of
# LayerNorm (--iterations 10, three buffer sets), then RMSNorm's.
for op_skip in layer_norm:3 rms_norm:22; do
  IFS=: read op skip <<<"$op_skip"
  timeout 90 $NCU --clock-control none -k regex:ForwardRing --launch-skip $skip --launch-count 1 $S \
    $B --forward-only --hidden 16384 --dtype fp32 --iterations 10 >"$out/ncu_$op.txt" 2>&1
  grep -E "^  void|Duration|DRAM Throughput|Issued Warp|No Eligible|Executed Ipc|Warp Cycles Per Issued" "$out/ncu_$op.txt" | head -10
done
for args in "" "--ring off" "--affine gamma" "--affine none"; do
  timeout 40 $B --forward-only --hidden 16384 --dtype fp32 $args | grep -E '^forward' | sed "s/^/[$args] /"
done | tee "$out/variants.txt"
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
