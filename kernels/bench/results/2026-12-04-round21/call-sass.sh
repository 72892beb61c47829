#!/usr/bin/env bash
# Per-instruction profiles (sass/): the realigned backward before this
# round (bf16 LayerNorm, saved statistics), then, on the raw-word build,
# the forward and staged-backward kernels the same way. Read them with
# kernels/bench/sass_summary.py FILE.csv.
tar -C .gpu -xJf .gpu/bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
r=$OUT/r; mkdir -p $r
N=/opt/nvidia/nsight-compute/2025.3.1/ncu; B=.gpu/bin/kernels/bench/norm_bench
prof() {
  name=$1; shift; regex=$1; shift
  timeout 120 $N --clock-control none --kernel-name-base demangled -k "regex:$regex" --launch-skip 2 --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight --section Occupancy --page source --print-source sass --csv $B "$@" > $r/sass_$name.csv 2> $r/sass_$name.err
}
# before the change (HEAD's norm_bench):
prof realign_bf16_2049_before 'bfloat16, \(int\)1, \(bool\)1, \(bool\)1' --backward-only --hidden 2049 --dtype bf16 --iterations 3
# after it:
prof fwd_bf16_4096 'ForwardLeanKernel<__nv_bfloat16' --forward-only --hidden 4096 --dtype bf16 --iterations 3
prof fwd_bf16_2049 'ForwardRealignKernel<__nv_bfloat16' --forward-only --hidden 2049 --dtype bf16 --iterations 3
prof fwd_bf16_16384 'ForwardLeanKernel<__nv_bfloat16' --forward-only --hidden 16384 --dtype bf16 --iterations 3
prof bwd_bf16_4096 'BackwardStagedKernel<__nv_bfloat16' --backward-only --hidden 4096 --dtype bf16 --iterations 3
prof fwd_f32_4096 'ForwardLeanKernel<float' --forward-only --hidden 4096 --dtype fp32 --iterations 3
xz -9 $r/*.csv; tar czf $OUT/r.tgz -C $OUT r
