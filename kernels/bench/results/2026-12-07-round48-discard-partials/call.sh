#!/usr/bin/env bash
# Round 48 on the GPU machine: the backward tests of kernels_gpu_test (every
# backward now drops its added partials from the L2), memcheck over the new
# column reduction test, then norm_bench --backward-only with the partials
# kept and dropped, interleaved twice in one binary (--discard-partials off /
# on), the row pass alone (--backward-dx-only) once, two tables owed: fp16
# (--dtype fp16) and the forward with a residual (--residual), and the bf16
# forward with gamma only and with no affine (where LayerNorm's time goes
# beside RMSNorm's). Bundle:
# kernels/bench/pack_gpu_bundle.sh build-gpu .gpu/r48
# tests/kernels/kernels_gpu_test kernels/bench/norm_bench. Writes under $1,
# packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
call_unpack .gpu/r48
bin=.gpu/r48/bin
export LD_LIBRARY_PATH=$PWD/.gpu/r48/lib
bench=$bin/kernels/bench/norm_bench
call_tests "$out" 200 --gtest_filter='*Backward*:*ColumnReduc*:KernelDispatch.*'
grep -E "^floats of droppable" "$out/kernels_gpu_test.log" | tee -a "$out/device.txt"
NORMSVC_TEST_MAX_ELEMENTS=65536 timeout 60 "$sanitizer" --tool memcheck --error-exitcode 9 \
  $bin/tests/kernels/kernels_gpu_test --gtest_filter='BackwardColumnReduction.*' \
  >"$out/memcheck.log" 2>&1
echo "memcheck exit $? ($(grep -cE '^========= (Invalid|Error)' "$out/memcheck.log") reports)" \
  | tee -a "$out/device.txt"
for run in 1 2; do
  for discard in off on; do
    name=backward_${discard}_$run
    timeout 90 "$bench" --backward-only --discard-partials $discard --json "$out/$name.json" \
      >"$out/$name.txt" 2>&1
    echo "$name exit $?" | tee -a "$out/device.txt"
  done
done
# Side by side: op dtype H, then the ratio to copy of each run in the order above.
paste <(awk '$1=="backward"{print $2, $3, $5}' "$out/backward_off_1.txt") \
  <(awk '$1=="backward"{print $NF}' "$out/backward_off_1.txt") \
  <(awk '$1=="backward"{print $NF}' "$out/backward_on_1.txt") \
  <(awk '$1=="backward"{print $NF}' "$out/backward_off_2.txt") \
  <(awk '$1=="backward"{print $NF}' "$out/backward_on_2.txt") | tee "$out/summary.txt"
for name in dx_only:--backward-dx-only fp16:--dtype\ fp16 residual:--forward-only\ --residual \
  gamma_only:--forward-only\ --dtype\ bf16\ --affine\ gamma \
  no_affine:--forward-only\ --dtype\ bf16\ --affine\ none; do
  flags=${name#*:}
  name=${name%%:*}
  timeout 120 "$bench" $flags --json "$out/$name.json" >"$out/$name.txt" 2>&1
  echo "$name exit $?" | tee -a "$out/device.txt"
done
call_end "$out"
