#!/usr/bin/env bash
# Runs owed on HEAD 1377c4d.
tar -C .gpu -xJf .gpu/bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; nproc; git log -1 --format=%h; } > $r/device.txt 2>&1
T=.gpu/bin/tests/kernels/kernels_gpu_test; B=.gpu/bin/kernels/bench/norm_bench
timeout 240 $T > $r/kernels_gpu_test.log 2>&1; echo kernels rc=$?; tail -3 $r/kernels_gpu_test.log
date -u >> $r/device.txt
NORMSVC_SERVER_BINARY=$PWD/.gpu/bin/server/normsvc timeout 200 .gpu/bin/tests/server/server_test > $r/server_test.log 2>&1; echo server rc=$?; tail -3 $r/server_test.log
date -u >> $r/device.txt
PYTHONUNBUFFERED=1 timeout 200 python3 kernels/bench/compare_torch.py --bench $B --lib $PWD/.gpu/lib --out $r/backward.json --bench-args="--backward-only" > $r/bench.log 2>&1; echo bench rc=$?
date -u >> $r/device.txt
NORMSVC_TEST_MAX_ELEMENTS=65536 timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool racecheck $T --gtest_filter='BackwardRealign.*' > $r/cs_racecheck.log 2>&1; echo race rc=$?; tail -3 $r/cs_racecheck.log
date -u >> $r/device.txt
xz -9 $r/*.log; tar czf $OUT/r.tgz -C $OUT r
