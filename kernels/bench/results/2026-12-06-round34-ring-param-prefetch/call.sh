#!/usr/bin/env bash
# Round 34: ForwardRingKernel (fp32) loads the next chunk's gamma/beta before
# each chunk's output. Bundle: tests/kernels/kernels_gpu_test and
# kernels/bench/norm_bench of the round, kernels/bench/norm_bench_r33 of
# 208ad78 (the baseline). Runs norm_bench --forward-only --dtype fp32 of both builds
# interleaved twice and both at H = 16384 with --affine gamma|none, then the
# whole kernels_gpu_test (the benchmark first, so that a call cut short still
# returns it), and
# memcheck over the ring tests with MEMCHECK=1. Writes
# under $1 and packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
export LD_LIBRARY_PATH=$PWD/.gpu/lib
bin=.gpu/bin
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
# MEMCHECK=1: compute-sanitizer memcheck over the ring tests too (about a
# minute more).
if [[ ${MEMCHECK:-0} == 1 ]]; then
  timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool memcheck \
    $bin/tests/kernels/kernels_gpu_test --gtest_filter='ForwardRing*' >"$out/memcheck.log" 2>&1
  echo "memcheck exit $?: $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -n 1)" |
    tee -a "$out/device.txt"
fi
for run in 1 2; do
  for build in norm_bench_r33 norm_bench; do
    timeout 60 $bin/kernels/bench/$build --forward-only --dtype fp32 --json "$out/${build}_$run.json" \
      >"$out/${build}_$run.txt" 2>&1
    echo "$build $run exit $?"
    grep -E '^forward .* (8192|16384|65536) ' "$out/${build}_$run.txt"
  done
done
for affine in gamma none; do
  for build in norm_bench_r33 norm_bench; do
    timeout 40 $bin/kernels/bench/$build --forward-only --dtype fp32 --hidden 16384 --affine $affine \
      | grep -E '^forward' | sed "s/^/[$build $affine] /"
  done
done | tee "$out/affine.txt"
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
timeout 200 $bin/tests/kernels/kernels_gpu_test >"$out/kernels_gpu_test.log" 2>&1
echo "kernels_gpu_test exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED) |tests? ran' "$out/kernels_gpu_test.log" | tail -n 8
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
# Then server_test with the GPU executor on the same build (bundle
# tests/server/server_test and server/normsvc too).
if [[ -x $bin/tests/server/server_test ]]; then
  NORMSVC_SERVER_BINARY=$PWD/$bin/server/normsvc timeout 200 $bin/tests/server/server_test \
    >"$out/server_test.log" 2>&1
  echo "server_test exit $?" | tee -a "$out/device.txt"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran' "$out/server_test.log" | tail -n 6
  tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
fi
