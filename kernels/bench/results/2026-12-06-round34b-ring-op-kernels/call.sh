#!/usr/bin/env bash
# Round 34b: round 34's parameter lookahead for fp32 LayerNorm only, with
# ForwardRingKernel split into one kernel an op (RMSNorm's then compiles as
# before round 34, no spills). Bundle: kernels/bench/norm_bench of the round,
# kernels/bench/norm_bench_r33 of 208ad78 (the baseline) and
# tests/kernels/kernels_gpu_test. norm_bench --forward-only --dtype fp32 at
# H = 16384 of both interleaved three times, the fp32 forward table of each
# once, then the ring, dispatch and forward matrix tests and 055ca21's
# BackwardWideClusters (not yet run on a GPU). Writes under $1, packs $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
export LD_LIBRARY_PATH=$PWD/.gpu/lib
bin=.gpu/bin
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
for run in 1 2 3; do
  for build in norm_bench_r33 norm_bench; do
    timeout 30 $bin/kernels/bench/$build --forward-only --dtype fp32 --hidden 16384 \
      | grep -E '^forward' | sed "s/^/[$build $run] /"
  done
done | tee "$out/h16384.txt"
for build in norm_bench_r33 norm_bench; do
  timeout 60 $bin/kernels/bench/$build --forward-only --dtype fp32 --json "$out/$build.json" \
    >"$out/$build.txt" 2>&1
done
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
timeout 100 $bin/tests/kernels/kernels_gpu_test --gtest_filter='ForwardRing*:*Dispatch*:AllDtypes/ForwardMatrix*:BackwardWideClusters*' \
  >"$out/kernels_gpu_test.log" 2>&1
echo "kernels_gpu_test (ring, dispatch, forward matrix, wide backward clusters) exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED) |tests? ran' "$out/kernels_gpu_test.log" | tail -n 8
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
