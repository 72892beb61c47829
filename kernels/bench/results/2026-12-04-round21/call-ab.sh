#!/usr/bin/env bash
# The raw-word build against HEAD's norm_bench (norm_bench_head, built from
# 5ed82e6), after the backward GPU tests. b-raw-every-dtype/: raw words for
# every dtype, H = 2049, three reps, then memcheck and initcheck over the
# realigned tests; c-raw-16-bit/: raw words for 16-bit rows only (the
# commit), H = 2049, 4095 and 8185, two reps. d-staged-stats/: the same
# loop over every backward shape (no --hidden) for the staged kernel's
# statistics through the ring (staged_stats_tried.patch), two reps.
tar -C .gpu -xJf .gpu/bundle.tar.xz; xz -d .gpu/norm_bench_head.xz; chmod +x .gpu/norm_bench_head
export LD_LIBRARY_PATH=$PWD/.gpu/lib
r=$OUT/r; mkdir -p $r
T=.gpu/bin/tests/kernels/kernels_gpu_test
timeout 200 $T --gtest_filter='Backward*:AllDtypes/Backward*' > $r/backward_tests.log 2>&1
A=.gpu/norm_bench_head; B=.gpu/bin/kernels/bench/norm_bench
for rep in 1 2; do
  for H in 2049 4095 8185; do
    for v in head:$A new:$B; do
      IFS=: read name bin <<< "$v"
      timeout 60 $bin --backward-only --hidden $H --json $r/ab_${name}_${H}_$rep.json > $r/ab_${name}_${H}_$rep.txt 2>&1
    done
  done
done
xz -9 $r/*.log; tar czf $OUT/r.tgz -C $OUT r
