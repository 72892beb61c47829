#!/usr/bin/env bash
# Where the staged realigning forward (ForwardRealignStagedKernel, the
# default for one-segment realigned launches since round 38) spends its time
# at H = 2049: Nsight Compute's summary sections (throughput, warp states,
# occupancy, memory and scheduler statistics) and the executed-instruction
# and warp-state counts per SASS instruction, at bf16 8189 x 2049 (LayerNorm,
# then RMSNorm; --forward-only). Bundle: kernels/bench/norm_bench. Writes
# under $1 and packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
export LD_LIBRARY_PATH=$PWD/.gpu/lib
B=.gpu/bin/kernels/bench/norm_bench
NCU=$(ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; echo "ncu: $NCU"; } >>"$out/device.txt" 2>&1
# norm_bench times LayerNorm first, then RMSNorm, each 9 warm-up launches
# (3 buffer sets, 3 times) and 3 timed: launches 4 and 16 are one of each.
for pick in "ln:3" "rms:15"; do
  IFS=: read name skip <<<"$pick"
  timeout 90 $NCU --clock-control none -k regex:ForwardRealignStaged --launch-skip $skip \
    --launch-count 1 --section WarpStateStats --section SourceCounters --section SpeedOfLight \
    --section LaunchStats --section Occupancy --section InstructionStats \
    --section MemoryWorkloadAnalysis --section SchedulerStats -o "$out/fwd_$name" \
    $B --forward-only --hidden 2049 --dtype bf16 --iterations 3 >"$out/ncu_$name.txt" 2>&1
  echo "ncu $name exit $?" | tee -a "$out/device.txt"
  timeout 60 $NCU -i "$out/fwd_$name.ncu-rep" --page details >"$out/details_$name.txt" 2>&1
  grep -E "^  void|Duration|Executed Instructions  |Warp Cycles Per Issued|DRAM Throughput|Achieved Occupancy" \
    "$out/details_$name.txt" | head -8
  timeout 60 $NCU -i "$out/fwd_$name.ncu-rep" --page source --csv --print-source sass \
    >"$out/sass_$name.csv" 2>"$out/sass_$name.err"
  echo "sass $name exit $? ($(wc -l <"$out/sass_$name.csv") lines)" | tee -a "$out/device.txt"
  gzip -f "$out/sass_$name.csv"
  rm -f "$out/fwd_$name.ncu-rep"
done
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
