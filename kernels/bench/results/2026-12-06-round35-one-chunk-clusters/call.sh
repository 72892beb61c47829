#!/usr/bin/env bash
# Round 35: 16-bit backward rows past a block (H = 8,200-65,536) one chunk a
# thread, in clusters of blocks of 512 (up to 8) or of 1,024. Bundle:
# kernels/bench/norm_bench_r33 (the baseline, without the change),
# kernels/bench/norm_bench_r35 and tests/kernels/kernels_gpu_test_r35 (with
# it). On the GPU: the round's backward and column-reduction tests, memcheck
# over the 16-bit backward matrix, then norm_bench --backward-only --dtype
# bf16 of both interleaved twice, and --backward-dx-only (the row pass
# alone) of both once. Writes under $1 and packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
export LD_LIBRARY_PATH=$PWD/.gpu/lib
bin=.gpu/bin
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
timeout 150 $bin/tests/kernels/kernels_gpu_test_r35 \
  --gtest_filter='Backward*:AllDtypes/BackwardMatrix.*:*Dispatch*' >"$out/backward_tests.log" 2>&1
echo "backward tests exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED) |tests? ran' "$out/backward_tests.log" | tail -n 6
timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck $bin/tests/kernels/kernels_gpu_test_r35 \
  --gtest_filter='AllDtypes/BackwardMatrix.*bf16:AllDtypes/BackwardMatrix.*fp16' >"$out/memcheck.log" 2>&1
echo "memcheck exit $?: $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -n 1)" | tee -a "$out/device.txt"
for run in 1 2; do
  for build in norm_bench_r33 norm_bench_r35; do
    timeout 60 $bin/kernels/bench/$build --backward-only --dtype bf16 --json "$out/${build}_$run.json" \
      >"$out/${build}_$run.txt" 2>&1
    echo "$build $run exit $?"
    grep -E '^backward .* (8192|16384|65536) ' "$out/${build}_$run.txt"
  done
done
for build in norm_bench_r33 norm_bench_r35; do
  for hidden in 16384 65536; do
    timeout 30 $bin/kernels/bench/$build --backward-dx-only --dtype bf16 --hidden $hidden \
      | grep -E '^backward' | sed "s/^/[$build dx-only] /"
  done
done | tee "$out/dx_only.txt"
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
