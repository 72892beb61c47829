#!/usr/bin/env bash
# Tile forward kernel: GPU tests, sanitizers on its tests, then norm_bench
# at H = 2049 with the tile kernel off and on, interleaved.
set -uo pipefail
out=$1
mkdir -p "$out"
tar -C .gpu -xJf .gpu/bundle.tar.xz
lib=$PWD/.gpu/lib
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/device.txt" 2>&1
date -u >>"$out/device.txt"
LD_LIBRARY_PATH=$lib timeout 100 .gpu/bin/tests/kernels/kernels_gpu_test --gtest_filter='ForwardTile*' >"$out/tile_test.log" 2>&1
echo "tile tests rc $?"; grep -E '^\[  (PASSED|FAILED) |tests? ran|Failure|differs|did not' "$out/tile_test.log" | head -20
for i in 1 2; do
  for t in off long-launches; do
    LD_LIBRARY_PATH=$lib timeout 60 .gpu/bin/kernels/bench/norm_bench --forward-only --hidden 2049 --tile $t \
      --json "$out/bench_${t}_$i.json" >"$out/bench_${t}_$i.log" 2>&1
    echo "bench $t $i rc $?"; grep -E "2049" "$out/bench_${t}_$i.log" | head -8
  done
done
date -u >>"$out/device.txt"
cs=/usr/local/cuda/bin/compute-sanitizer
for tool in memcheck racecheck synccheck; do
  NORMSVC_TEST_MAX_ELEMENTS=65536 LD_LIBRARY_PATH=$lib timeout 100 $cs --tool $tool --error-exitcode 9 \
    .gpu/bin/tests/kernels/kernels_gpu_test --gtest_filter='ForwardTile.Matches*' >"$out/cs_$tool.log" 2>&1
  echo "$tool rc $?"; grep -E "ERROR SUMMARY|Hazard|PASSED|FAILED" "$out/cs_$tool.log" | head -4
done
date -u >>"$out/device.txt"
LD_LIBRARY_PATH=$lib timeout 170 .gpu/bin/tests/kernels/kernels_gpu_test >"$out/kernels_gpu_test.log" 2>&1
echo "all kernel tests rc $?"; grep -E '^\[  (PASSED|FAILED) |tests? ran' "$out/kernels_gpu_test.log" | tail -12
date -u >>"$out/device.txt"
