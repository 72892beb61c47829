#!/usr/bin/env bash
# Round 29, third call (the plan change: fp32 rows of H = 16,388 to 65,536
# staged in clusters of 2 to 4): kernels_gpu_test; memcheck and racecheck
# over the staged tests; the full table beside PyTorch (compare_torch.py);
# fp32 32768 and 65536 at 2^24 and 2^26 elements. Writes under $1.
set -uo pipefail
out=${1:?usage: call3.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
lib=$PWD/.gpu/lib
bench=.gpu/bin/kernels/bench/norm_bench
tests=.gpu/bin/tests/kernels/kernels_gpu_test
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
LD_LIBRARY_PATH=$lib timeout 200 "$tests" >"$out/kernels_gpu_test.log" 2>&1
echo "kernels_gpu_test exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED) ' "$out/kernels_gpu_test.log" | tail -n 12
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  LD_LIBRARY_PATH=$lib timeout "$([[ $tool == memcheck ]] && echo 120 || echo 100)" "$sanitizer" --tool "$tool" "$tests" \
    --gtest_filter='ForwardStaged.*' >"$out/$tool.log" 2>&1
  echo "$tool exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool.log" | tail -n 1)" |
    tee -a "$out/device.txt"
done
PYTHONUNBUFFERED=1 timeout 130 python3 kernels/bench/compare_torch.py --bench "$bench" \
  --lib "$lib" --out "$out/round.json" >"$out/bench.log" 2>&1
echo "compare_torch exit $?" | tee -a "$out/device.txt"
for elements in 16777216 67108864; do
  for hidden in 32768 65536; do
    LD_LIBRARY_PATH=$lib timeout 60 "$bench" --forward-only --dtype fp32 --hidden "$hidden" \
      --elements "$elements" 2>&1 | grep -E '^forward' >>"$out/fp32_cluster_rows.txt"
  done
done
cat "$out/fp32_cluster_rows.txt"
