#!/usr/bin/env bash
# First call: the GPU runs owed by the previous round on the tree of
# 5ed82e6 (kernels_gpu_test in full, server_test against the bundled
# server), and a probe of cooperative launch with programmatic dependent
# launch (owed-tests/coop_probe.cu, built with
# `nvcc -O3 -arch=sm_90 -std=c++17 coop_probe.cu -o coop_probe`).
# Bundle: kernels/bench/pack_gpu_bundle.sh build-gpu .gpu
#   tests/kernels/kernels_gpu_test tests/server/server_test server/normsvc
tar -C .gpu -xJf .gpu/bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; nproc; } > $r/device.txt 2>&1
.gpu/coop_probe 2>&1 | tee $r/coop_probe.txt
timeout 240 .gpu/bin/tests/kernels/kernels_gpu_test > $r/kernels_gpu_test.log 2>&1; echo rc=$?
NORMSVC_SERVER_BINARY=$PWD/.gpu/bin/server/normsvc timeout 200 .gpu/bin/tests/server/server_test > $r/server_test.log 2>&1; echo rc=$?
date -u >> $r/device.txt; xz -9 $r/*.log; tar czf $OUT/r.tgz -C $OUT r
