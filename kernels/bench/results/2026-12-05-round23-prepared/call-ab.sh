#!/usr/bin/env bash
# The A/B this patch is waiting for (not yet run: no GPU machine was lent
# when it was prepared). norm_bench with the patch (the bundle's) against
# norm_bench of the tree without it (bin/kernels/bench/norm_bench_head in
# the same bundle), every bf16 backward shape (norm_bench's 16-bit dtype; the
# patch touches 16-bit in-block rows only), interleaved twice, after the whole kernels_gpu_test on the patched
# build; then the full PyTorch table of the patched build.
# Bundle (here, about 26 MB): build-gpu at the parent commit, copy its
# kernels/bench/norm_bench to build-gpu/kernels/bench/norm_bench_head; apply
# staged_gamma_shared.patch, cmake --build build-gpu, then
#   kernels/bench/pack_gpu_bundle.sh build-gpu .gpu kernels/bench/norm_bench \
#     kernels/bench/norm_bench_head tests/kernels/kernels_gpu_test
tar -C .gpu -xJf .gpu/bundle.tar.xz
L=$PWD/.gpu/lib
B=.gpu/bin/kernels/bench
o=$OUT/ab; mkdir -p $o
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $o/device.txt 2>&1
date -u > $o/date.txt
LD_LIBRARY_PATH=$L timeout 200 .gpu/bin/tests/kernels/kernels_gpu_test > $o/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$?"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran' $o/kernels_gpu_test.log | tail -20
for r in 1 2; do
  for v in head new; do
    bin=$B/norm_bench; [ $v = head ] && bin=$B/norm_bench_head
    LD_LIBRARY_PATH=$L timeout 100 $bin --backward-only --dtype bf16 --json $o/${v}_$r.json \
      > $o/${v}_$r.txt 2>&1
    echo "$v $r rc=$?"
  done
done
# python3 without LD_LIBRARY_PATH: the bundled libraries can break PyTorch's imports.
PYTHONUNBUFFERED=1 timeout 150 python3 kernels/bench/compare_torch.py --bench $B/norm_bench \
  --lib $L --out $o/round.json > $o/bench.log 2>&1
echo "compare_torch rc=$?"
tail -70 $o/bench.log
tar czf $OUT/r.tgz -C $OUT ab
