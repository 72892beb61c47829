#!/usr/bin/env bash
# The tests of the build that lands rounds 39-41 (or 39-40): bundle .gpu
# with its tests/kernels/kernels_gpu_test. The whole suite (the staged
# realigning kernel against the shifting kernel bit for bit at 2, 3 and 4
# stages, one segment and tables of segments, among the rest), then memcheck
# and racecheck over the staged kernel's many-row and segment-table tests.
# Writes under $1 and packs it into $1.tgz.
set -u
out=${1:?usage: call_tests.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
export LD_LIBRARY_PATH=$PWD/.gpu/lib
bin=.gpu/bin
CS=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; echo "sanitizer: $CS"; } \
  >"$out/device.txt" 2>&1
timeout 300 $bin/tests/kernels/kernels_gpu_test >"$out/kernels_gpu_test.log" 2>&1
echo "kernels_gpu_test exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran' "$out/kernels_gpu_test.log" | tail -n 12
for tool in memcheck racecheck; do
  NORMSVC_TEST_MAX_ELEMENTS=65536 timeout 100 $CS --tool $tool --error-exitcode 9 \
    $bin/tests/kernels/kernels_gpu_test \
    --gtest_filter='ForwardRealignStaged.Many*:ForwardRealignStaged.Groups*' \
    >"$out/$tool.log" 2>&1
  echo "$tool exit $? ($(grep -cE '^========= (Invalid|Error|Race)' "$out/$tool.log") reports)" \
    | tee -a "$out/device.txt"
done
date -u >>"$out/device.txt"
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
