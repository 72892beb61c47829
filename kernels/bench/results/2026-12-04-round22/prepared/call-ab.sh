#!/usr/bin/env bash
# The A/B this patch is waiting for (not yet run): norm_bench with the patch
# (the bundle's) against norm_bench of the tree without it (.gpu/norm_bench_head,
# carried as an .xz), every backward shape, interleaved twice, after the
# backward GPU tests on the patched build.
# Bundle: apply staged_fewer_ops.patch, cmake --build build-gpu, then
#   kernels/bench/pack_gpu_bundle.sh build-gpu .gpu tests/kernels/kernels_gpu_test kernels/bench/norm_bench
# and xz -9 a norm_bench built without the patch into .gpu/norm_bench_head.xz.
tar -C .gpu -xJf .gpu/bundle.tar.xz
xz -dk .gpu/norm_bench_head.xz && chmod +x .gpu/norm_bench_head
export LD_LIBRARY_PATH=$PWD/.gpu/lib
r=$OUT/r; mkdir -p $r
T=.gpu/bin/tests/kernels/kernels_gpu_test
timeout 200 $T --gtest_filter='Backward*:AllDtypes/BackwardMatrix.*' > $r/backward_tests.log 2>&1; echo tests rc=$?
for rep in 1 2; do
  for v in head new; do
    B=.gpu/bin/kernels/bench/norm_bench; [ $v = head ] && B=.gpu/norm_bench_head
    $B --backward-only --json $r/${v}_$rep.json > $r/${v}_$rep.txt 2>&1
  done
done
xz -9 $r/*.log; tar czf $OUT/r.tgz -C $OUT r
