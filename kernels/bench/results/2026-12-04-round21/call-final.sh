#!/usr/bin/env bash
# The committed kernels (final/): kernels_gpu_test in full, the four
# sanitizers over the realigned tests, the backward table beside PyTorch.
tar -C .gpu -xJf .gpu/bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
r=$OUT/r; mkdir -p $r
T=.gpu/bin/tests/kernels/kernels_gpu_test; B=.gpu/bin/kernels/bench/norm_bench
timeout 240 $T > $r/kernels_gpu_test.log 2>&1; echo rc=$?
S=/usr/local/cuda/bin/compute-sanitizer
for tool in memcheck initcheck racecheck synccheck; do
  NORMSVC_TEST_MAX_ELEMENTS=65536 timeout 100 $S --tool $tool $T --gtest_filter='BackwardRealign.*' > $r/cs_$tool.log 2>&1
done
PYTHONUNBUFFERED=1 timeout 200 python3 kernels/bench/compare_torch.py --bench $B --lib $PWD/.gpu/lib --out $r/round21_backward.json --bench-args="--backward-only" > $r/bench.log 2>&1
xz -9 $r/*.log; tar czf $OUT/r.tgz -C $OUT r
