#!/usr/bin/env bash
# Round 33 (prepared, not yet run): fp32 backward rows of H = 32,772-65,536
# on the staged kernel in clusters of blocks of 1,024 (fp32_long_rows_staged.patch).
# Build here twice: HEAD's norm_bench copied to build-gpu/kernels/bench/norm_bench_head,
# then the patched tree's norm_bench and kernels_gpu_test; bundle all three
# (kernels/bench/pack_gpu_bundle.sh build-gpu .gpu kernels/bench/norm_bench
# kernels/bench/norm_bench_head tests/kernels/kernels_gpu_test). On the GPU:
# the patched build's backward tests and staged-backward memcheck, then
# norm_bench --backward-only --dtype fp32 of both interleaved twice.
# Writes under $1 and packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
export LD_LIBRARY_PATH=$PWD/.gpu/lib
bin=.gpu/bin
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
timeout 120 $bin/tests/kernels/kernels_gpu_test --gtest_filter='Backward*:AllDtypes/BackwardMatrix.*' \
  >"$out/backward_tests.log" 2>&1
echo "backward tests exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED) |tests? ran' "$out/backward_tests.log" | tail -n 6
timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool memcheck $bin/tests/kernels/kernels_gpu_test \
  --gtest_filter='BackwardOptions.*:AllDtypes/BackwardMatrix.*fp32' >"$out/memcheck.log" 2>&1
echo "memcheck exit $?: $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -n 1)" | tee -a "$out/device.txt"
for run in 1 2; do
  for build in norm_bench_head norm_bench; do
    timeout 60 $bin/kernels/bench/$build --backward-only --dtype fp32 --json "$out/${build}_$run.json" \
      >"$out/${build}_$run.txt" 2>&1
    echo "$build $run exit $?"
    grep -E '^backward .* (32768|65536) ' "$out/${build}_$run.txt"
  done
done
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
