#!/usr/bin/env bash
# Round 30, first call: the wide column reduction. The backward GPU tests
# (the new BackwardColumnReduction cases among them); then norm_bench
# --backward-only with --column-reduce narrow and wide (wide wherever
# H % 4 == 0), interleaved twice; then Nsight Compute on the reduction of
# bf16 LayerNorm 1024 x 16384 and 256 x 65536 in both forms. Writes under $1.
set -u
out=${1:?usage: call.sh OUT_DIR}
mkdir -p "$out"
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
export LD_LIBRARY_PATH=$PWD/.gpu/lib
B=.gpu/bin/kernels/bench/norm_bench
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >"$out/device.txt" 2>&1
timeout 150 .gpu/bin/tests/kernels/kernels_gpu_test \
  --gtest_filter='Backward*:AllDtypes/BackwardMatrix.*' >"$out/backward_tests.log" 2>&1
echo "backward tests exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED) |tests? ran' "$out/backward_tests.log" | tail -n 8
for run in 1 2; do
  for form in narrow wide; do
    timeout 60 $B --backward-only --column-reduce $form --json "$out/${form}_$run.json" \
      >"$out/${form}_$run.txt" 2>&1
    echo "$form $run exit $?"
  done
done
NCU=$(ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for hidden in 16384 65536; do
  for form in narrow wide; do
    timeout 40 $NCU --clock-control none -k regex:ColumnReduce --launch-skip 3 --launch-count 1 \
      --section SpeedOfLight $B --backward-only --column-reduce $form --hidden $hidden --dtype bf16 \
      --iterations 3 >"$out/ncu_${form}_$hidden.txt" 2>&1
    echo "ncu $form $hidden: $(grep -E '^  [a-z(]|Duration' "$out/ncu_${form}_$hidden.txt" | tr -s ' ' | tr '\n' ' ' | cut -c1-200)"
  done
done
python3 - "$out" <<'PY'
import json, sys, statistics, glob
out = sys.argv[1]
def load(form):
    runs = [json.load(open(p))["records"] for p in sorted(glob.glob(f"{out}/{form}_*.json"))]
    res = {}
    for recs in runs:
        for r in recs:
            key = (r["kind"], r["op"], r["dtype"], r["hidden"])
            res.setdefault(key, []).append(r["ratio_to_copy"])
    return res
n, w = load("narrow"), load("wide")
for key in sorted(n):
    if key in w:
        print("%-10s %-10s %-5s %6d  narrow %s  wide %s" % (key + (" ".join("%.3f" % v for v in n[key]), " ".join("%.3f" % v for v in w[key]))))
PY
