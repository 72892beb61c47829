#!/usr/bin/env bash
# One call on the GPU machine: the kernel GPU tests, then (only if they all
# pass) norm_bench next to PyTorch through compare_torch.py. Run from the
# repository root there, after building here and bundling:
#   cmake --preset gpu && cmake --build build-gpu -j2
#   kernels/bench/pack_gpu_bundle.sh build-gpu      (then carry .gpu)
#
#   kernels/bench/device_round.sh OUT_DIR [norm_bench arguments, e.g. --forward-only]
#
# Writes device.txt, kernels_gpu_test.log, bench.log, round.json and
# round.norm_bench.json under OUT_DIR, then packs OUT_DIR into OUT_DIR.tgz
# and removes the folder (a GPU call returns a limited number of files:
# loose ones past it are lost). Stages are time-boxed (tests 170 s,
# benchmark 110 s) so the whole call stays under 300 s.
set -uo pipefail
out=${1:?usage: device_round.sh OUT_DIR [norm_bench arguments]}
shift
mkdir -p "$out"
# A bundle packed by pack_gpu_bundle.sh is unpacked first.
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
lib=$PWD/.gpu/lib
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/device.txt" 2>&1
LD_LIBRARY_PATH=$lib timeout 170 .gpu/bin/tests/kernels/kernels_gpu_test >"$out/kernels_gpu_test.log" 2>&1
rc=$?
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran' "$out/kernels_gpu_test.log" | tail -n 30
pack() { tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"; }
if [ "$rc" -ne 0 ]; then
  tail -n 40 "$out/kernels_gpu_test.log"
  echo "kernels_gpu_test failed (exit $rc): benchmark not run"
  pack
  exit "$rc"
fi
PYTHONUNBUFFERED=1 timeout 110 python3 kernels/bench/compare_torch.py \
  --bench .gpu/bin/kernels/bench/norm_bench --lib "$lib" --out "$out/round.json" \
  --bench-args="$*" 2>&1 | tee "$out/bench.log" | tail -n 60
rc=${PIPESTATUS[0]}
pack
exit "$rc"
