#!/usr/bin/env bash
# HEAD check of 3f0c37b (the wide column reduction's commit plus records)
# and round 32's A/B in one call. HEAD: kernels_gpu_test (the _head build),
# memcheck over BackwardColumnReduction.* (server_test last ran at
# f0d75db: a call carries at most 64 MiB). Round 32 (16-bit partial stores as runs of 512 bytes a warp):
# its backward GPU tests, then norm_bench --backward-only of HEAD and of it
# interleaved twice. Writes under $1 and packs it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
export LD_LIBRARY_PATH=$PWD/.gpu/lib
bin=.gpu/bin
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
timeout 170 $bin/tests/kernels/kernels_gpu_test_head >"$out/kernels_gpu_test_head.log" 2>&1
echo "HEAD kernels_gpu_test exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED) |tests? ran' "$out/kernels_gpu_test_head.log" | tail -n 6
timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool memcheck $bin/tests/kernels/kernels_gpu_test_head \
  --gtest_filter='BackwardColumnReduction.*' >"$out/memcheck_column_reduction.log" 2>&1
echo "HEAD memcheck BackwardColumnReduction exit $?: $(grep -E 'ERROR SUMMARY' "$out/memcheck_column_reduction.log" | tail -n 1)" |
  tee -a "$out/device.txt"
timeout 100 $bin/tests/kernels/kernels_gpu_test --gtest_filter='Backward*:AllDtypes/BackwardMatrix.*' \
  >"$out/round32_backward_tests.log" 2>&1
echo "round 32 backward tests exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED) |tests? ran' "$out/round32_backward_tests.log" | tail -n 4
for run in 1 2; do
  for build in norm_bench_head norm_bench; do
    timeout 60 $bin/kernels/bench/$build --backward-only --json "$out/${build}_$run.json" \
      >"$out/${build}_$run.txt" 2>&1
    echo "$build $run exit $?"
  done
done
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import json, sys, glob
out = sys.argv[1]
def load(build):
    res = {}
    for p in sorted(glob.glob(f"{out}/{build}_[0-9].json")):
        for r in json.load(open(p))["records"]:
            res.setdefault((r["op"], r["dtype"], r["hidden"]), []).append(r["ratio_to_copy"])
    return res
a, b = load("norm_bench_head"), load("norm_bench")
for key in sorted(a):
    print("%-10s %-5s %6d  head %s  round32 %s" % (key + (" ".join("%.3f" % v for v in a[key]),
          " ".join("%.3f" % v for v in b.get(key, [])))))
PY
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
