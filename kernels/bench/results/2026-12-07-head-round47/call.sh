#!/usr/bin/env bash
# HEAD with round 47 landed, on the GPU machine: the whole kernels_gpu_test,
# the whole table beside PyTorch (compare_torch.py), then racecheck over the
# staged forward tests that the rounds 46-47 call's racecheck did not reach
# in its time and the lean staged kernel's own test. Bundle:
# kernels/bench/pack_gpu_bundle.sh build-gpu .gpu/r47
# tests/kernels/kernels_gpu_test kernels/bench/norm_bench. Writes under $1,
# packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
call_unpack .gpu/r47
bin=.gpu/r47/bin
export LD_LIBRARY_PATH=$PWD/.gpu/r47/lib
call_tests "$out" 200 --gtest_filter='*'
PYTHONUNBUFFERED=1 timeout 170 python3 kernels/bench/compare_torch.py \
  --bench "$bin/kernels/bench/norm_bench" --lib "$LD_LIBRARY_PATH" --out "$out/round.json" \
  >"$out/bench.log" 2>&1
echo "compare_torch exit $?" | tee -a "$out/device.txt"
grep -E "MISS|multi_segment|small " "$out/bench.log" | tr -s ' ' | head -40
NORMSVC_TEST_MAX_ELEMENTS=65536 timeout 120 "$sanitizer" --tool racecheck --error-exitcode 9 \
  $bin/tests/kernels/kernels_gpu_test \
  --gtest_filter='ForwardStaged.PersistentClustersLoopOverManyRows:ForwardStaged.RowsGiveTheSameBitsInAMixedLaunch:ForwardStaged.LeanKernelOnEveryDtypeOpAndAffine' \
  >"$out/racecheck.log" 2>&1
echo "racecheck exit $? ($(grep -cE '^========= (Invalid|Error|Race)' "$out/racecheck.log") reports)" \
  | tee -a "$out/device.txt"
call_end "$out"
