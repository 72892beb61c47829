#!/usr/bin/env bash
# Rounds 46 and 47 on the GPU machine, in one build (.gpu/r4647:
# pack_gpu_bundle.sh build-gpu .gpu/r4647 tests/kernels/kernels_gpu_test
# kernels/bench/norm_bench; round 46 touches realigned rows, round 47
# staged rows: no shape is served by both). The whole kernels_gpu_test of
# that build, memcheck and racecheck over the tests of the kernels either
# round changes, then norm_bench forward with the base commit's kernels
# library (.gpu/base/.gpu-base.so.xz, same ABI) and the patched one
# interleaved twice; last, the whole table beside PyTorch
# (compare_torch.py) with the base library: the landed kernels' table on
# this card. Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
call_ab_bundle .gpu/r4647
call_tests "$out" 240 --gtest_filter='*'
call_sanitizers "$out" 'ForwardRealign*:ForwardBatchInvariance.*:ForwardSpecial*:ForwardStaged*' 150
call_forward_ab "$out" r4647 "bf16 2049" "fp32 2049" "bf16 4095" "bf16 8191" \
  "bf16 65536" "bf16 131072" "bf16 262144" "fp32 65536" "fp32 32768" "bf16 4096"
PYTHONUNBUFFERED=1 timeout 170 python3 kernels/bench/compare_torch.py \
  --bench "$bin/kernels/bench/norm_bench" --lib "$base_lib" --out "$out/table_base.json" \
  >"$out/table_base.log" 2>&1
echo "compare_torch (base) exit $?" | tee -a "$out/device.txt"
grep -E "MISS|multi_segment|small " "$out/table_base.log" | tr -s ' ' | head -40
call_end "$out"
