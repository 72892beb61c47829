#!/usr/bin/env bash
# HEAD's kernels on the GPU machine: the whole kernels_gpu_test (with the
# tests added on 2026-12-07 evening: launch validation, 1,000 long rows,
# large-mean and tiny backward rows, output guards) and the table beside
# PyTorch (compare_torch.py; the kernels' speed is 5272066's). Bundle:
# kernels/bench/pack_gpu_bundle.sh build-gpu .gpu/ht
# tests/kernels/kernels_gpu_test tests/server/server_test server/normsvc
# kernels/bench/norm_bench. Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
call_use_bundle .gpu/ht
call_tests "$out" 330 --gtest_filter='*'
grep -E "^\[ forward  \].*long rows|LongRows|droppable" "$out/kernels_gpu_test.log" | tail -n 8
PYTHONUNBUFFERED=1 timeout 200 python3 kernels/bench/compare_torch.py \
  --bench "$bin/kernels/bench/norm_bench" --lib "$LD_LIBRARY_PATH" --out "$out/round.json" \
  >"$out/bench.log" 2>&1
echo "compare_torch exit $?" | tee -a "$out/device.txt"
grep -E "MISS|multi_segment|small " "$out/bench.log" | tr -s ' ' | head -40
call_end "$out"
