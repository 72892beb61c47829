#!/usr/bin/env bash
# Round 31, first call: the staged backward's cluster rows two a block.
# kernels_gpu_test (the new BackwardClusterRows case among them); then
# norm_bench --backward-only of round 30's build (norm_bench_r30) and this
# one interleaved twice; --backward-dx-only of both at 16384 and 65536.
# Writes under $1 and packs it into $1.tgz (the call returns few files).
set -u
out=${1:?usage: call.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
export LD_LIBRARY_PATH=$PWD/.gpu/lib
bench=.gpu/bin/kernels/bench
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
timeout 200 .gpu/bin/tests/kernels/kernels_gpu_test >"$out/kernels_gpu_test.log" 2>&1
echo "kernels_gpu_test exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED) |tests? ran' "$out/kernels_gpu_test.log" | tail -n 8
for run in 1 2; do
  for build in norm_bench_r30 norm_bench; do
    timeout 60 $bench/$build --backward-only --json "$out/${build}_$run.json" >"$out/${build}_$run.txt" 2>&1
    echo "$build $run exit $?"
  done
done
for build in norm_bench_r30 norm_bench; do
  for hidden in 16384 65536; do
    timeout 30 $bench/$build --backward-dx-only --hidden $hidden | grep -E '^backward' | sed "s/^/$build /"
  done
done | tee "$out/dx_only.txt"
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import json, sys, glob
out = sys.argv[1]
def load(build):
    res = {}
    for p in sorted(glob.glob(f"{out}/{build}_[0-9].json")):
        for r in json.load(open(p))["records"]:
            res.setdefault((r["op"], r["dtype"], r["hidden"]), []).append((r["ratio_to_copy"], r["plan"]))
    return res
a, b = load("norm_bench_r30"), load("norm_bench")
for key in sorted(a):
    print("%-10s %-5s %6d  r30 %s  new %s  %s" % (key + (" ".join("%.3f" % v for v, _ in a[key]),
          " ".join("%.3f" % v for v, _ in b.get(key, [])), b.get(key, [(0, "")])[0][1])))
PY
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
