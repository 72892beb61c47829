#!/usr/bin/env bash
# Round 39: the staged realigning forward with 2, 3 or 4 stages. Bundle in
# BUNDLE (default .gpu-r39; the round's patch applied, built for sm_90):
# tests/kernels/kernels_gpu_test and kernels/bench/norm_bench. On the GPU:
# the staged kernel's tests (every stage count against the shifting kernel,
# bit for bit), memcheck and racecheck over them, then norm_bench
# --forward-only at H = 2049, 4095 and 8191 with --realign-stages 2, 3 and
# 4 (HIDDENS overrides the list), interleaved RUNS times (default 2). Writes under $1, packs it into
# $1.tgz and removes the folder.
set -u
out=${1:?usage: call.sh OUT_DIR [RUNS] [BUNDLE]}
runs=${2:-2}
bundle=${3:-.gpu-r39}
mkdir -p "$out"
if [[ ! -d $bundle/bin && -f $bundle/bundle.tar.xz ]]; then tar -C "$bundle" -xJf "$bundle/bundle.tar.xz"; fi
export LD_LIBRARY_PATH=$PWD/$bundle/lib
bin=$bundle/bin
CS=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; echo "sanitizer: $CS"; } \
  >"$out/device.txt" 2>&1
timeout 150 $bin/tests/kernels/kernels_gpu_test --gtest_filter='ForwardRealign*:ForwardEarlyLaunch*:*Special*:*BatchInvariance*' \
  >"$out/tests.log" 2>&1
echo "tests exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED) |tests? ran' "$out/tests.log" | tail -n 8
for tool in memcheck racecheck; do
  NORMSVC_TEST_MAX_ELEMENTS=65536 timeout 120 $CS --tool $tool --error-exitcode 9 \
    $bin/tests/kernels/kernels_gpu_test --gtest_filter='ForwardRealignStaged.Many*' \
    >"$out/$tool.log" 2>&1
  echo "$tool exit $? ($(grep -cE '^========= (Invalid|Error|Race)' "$out/$tool.log") reports)" \
    | tee -a "$out/device.txt"
done
for run in $(seq 1 "$runs"); do
  for hidden in ${HIDDENS:-2049 4095 8191}; do
    for stages in 2 3 4; do
      timeout 60 $bin/kernels/bench/norm_bench --forward-only --hidden $hidden \
        --realign-stages $stages --json "$out/s${stages}_${hidden}_$run.json" \
        >"$out/s${stages}_${hidden}_$run.txt" 2>&1
      echo "stages $stages $hidden $run exit $?"
      grep -E '^forward ' "$out/s${stages}_${hidden}_$run.txt" | awk '{print $2, $3, $5, $NF}' | tr '\n' ';'
      echo
    done
  done
done
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
