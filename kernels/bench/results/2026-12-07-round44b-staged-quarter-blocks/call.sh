#!/usr/bin/env bash
# Round 44b on the GPU machine (bundle: kernels/bench/pack_gpu_bundle.sh
# build-gpu of main with round44b.patch, blocks of 256 the default): the whole
# kernels_gpu_test, then
# norm_bench --staged-blocks half / quarter interleaved twice over the staged
# long rows, then memcheck over the new GPU test. Writes under $1, packs it
# into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
bench=$bin/kernels/bench/norm_bench
call_tests "$out" 200 --gtest_filter='*'
for run in 1 2; do
  for blocks in half quarter; do
    for shape in "bf16 65536 256" "bf16 65536 1056" "fp32 32768 512" "fp32 65536 256" \
      "bf16 131072 128"; do
      read -r dtype hidden rows <<<"$shape"
      name=${blocks}_${dtype}_${hidden}_${rows}_$run
      timeout 40 $bench --forward-only --dtype $dtype --hidden $hidden \
        --elements $((rows * hidden)) --staged-blocks $blocks --json "$out/$name.json" \
        >"$out/$name.txt" 2>&1
      echo "$name exit $?: $(grep -E '^forward' "$out/$name.txt" | awk '{print $2, $(NF-7), $(NF-5), $(NF-4), $NF}' | tr '\n' ' ')"
    done
  done
done
NORMSVC_TEST_MAX_ELEMENTS=65536 timeout 120 "$sanitizer" --tool memcheck --error-exitcode 9 \
  $bin/tests/kernels/kernels_gpu_test --gtest_filter='ForwardStaged.QuarterBlocksMatchReference' \
  >"$out/memcheck.log" 2>&1
echo "memcheck exit $? ($(grep -cE '^========= (Invalid|Error)' "$out/memcheck.log") reports)" \
  | tee -a "$out/device.txt"
call_end "$out"
