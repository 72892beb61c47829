#!/usr/bin/env bash
# server_test with the GPU executor, then the CPU A/B of this build against the last one.
set -u
tar -C .gpu -xJf .gpu/bundle.tar.xz
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; nproc; uname -r; } > $r/device.txt 2>&1
date -u +%H:%M:%S > $r/t_server_test_start
NORMSVC_SERVER_BINARY=$PWD/.gpu/bin/server/normsvc LD_LIBRARY_PATH=$PWD/.gpu/lib timeout 250 .gpu/bin/tests/server/server_test > $r/server_test.log 2>&1
echo "server_test rc $?" | tee $r/server_test.rc
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $r/server_test.log | head -20
date -u +%H:%M:%S > $r/t_tc_start
VARIANTS="" LD_LIBRARY_PATH=$PWD/.gpu/lib client/bench/thread_cpu.sh .gpu/bin $r/tc 3 4 $PWD/.gpu/before/normsvc > $r/tc.log 2>&1
date -u +%H:%M:%S > $r/t_end
tail -n 40 $r/tc/summary.md
tar czf $OUT/r.tgz -C $OUT r
