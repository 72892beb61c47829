#!/usr/bin/env bash
# Round 43 on the GPU machine (bundle: kernels/bench/pack_gpu_bundle.sh
# build-gpu of main with round43.patch): the whole kernels_gpu_test; then
# norm_bench with --staged-refill off / on interleaved twice at bf16
# 65536 (256 and 1,056 rows) and fp32 262144 (64 rows: blocks of 1,024);
# then memcheck and racecheck over the new refill test. Writes under $1,
# packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
bench=$bin/kernels/bench/norm_bench
call_tests "$out" 200 --gtest_filter='*'
for run in 1 2; do
  for refill in off on; do
    for shape in "bf16 65536 256" "bf16 65536 1056" "fp32 262144 64"; do
      read -r dtype hidden rows <<<"$shape"
      name=${refill}_${dtype}_${hidden}_${rows}_$run
      timeout 40 $bench --forward-only --dtype $dtype --hidden $hidden \
        --elements $((rows * hidden)) --staged-refill $refill --json "$out/$name.json" \
        >"$out/$name.txt" 2>&1
      echo "$name exit $?: $(grep -E '^forward' "$out/$name.txt" | awk '{print $2, $NF}' | tr '\n' ' ')"
    done
  done
done
for tool in memcheck racecheck; do
  timeout 120 "$sanitizer" --tool $tool --error-exitcode 9 $bin/tests/kernels/kernels_gpu_test \
    --gtest_filter='ForwardStaged.RefillAcrossSegmentsGivesTheSameBits' >"$out/$tool.log" 2>&1
  echo "$tool exit $? ($(grep -cE '^========= (Invalid|Error|Race)' "$out/$tool.log") reports)" \
    | tee -a "$out/device.txt"
done
call_end "$out"
