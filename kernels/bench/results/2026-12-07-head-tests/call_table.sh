#!/usr/bin/env bash
# The table beside PyTorch (compare_torch.py) alone, for the H200 (the
# kernels' speed is 5272066's; run-h100/ has it on an H100). Bundle: as
# call2.sh's (.gpu/ht2). Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call_table.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
call_use_bundle .gpu/ht2
PYTHONUNBUFFERED=1 timeout 240 python3 kernels/bench/compare_torch.py \
  --bench "$bin/kernels/bench/norm_bench" --lib "$LD_LIBRARY_PATH" --out "$out/round.json" \
  >"$out/bench.log" 2>&1
echo "compare_torch exit $?" | tee -a "$out/device.txt"
grep -E "MISS|multi_segment|small " "$out/bench.log" | tr -s ' ' | head -40
call_end "$out"
