#!/usr/bin/env bash
# server_test (whole suite, CUDA backend included) at HEAD on the GPU machine.
# Bundle made here with
#   kernels/bench/pack_gpu_bundle.sh build-gpu .gpu-h tests/server/server_test server/normsvc
# and carried with `carry: [".gpu-h"]`; run as `bash .gpu-h/call.sh`.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
tar -C .gpu-h -xJf .gpu-h/bundle.tar.xz
o=$OUT/h; mkdir -p $o
finish() { tar czf $OUT/h.tgz -C $OUT h; echo "tarred at $(el) s"; }
trap finish EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; echo "cpus: $(nproc)"; git log -1 --format=%h; } > $o/device.txt 2>&1
cat $o/device.txt
NORMSVC_SERVER_BINARY=$PWD/.gpu-h/bin/server/normsvc LD_LIBRARY_PATH=$PWD/.gpu-h/lib timeout 300 \
  .gpu-h/bin/tests/server/server_test > $o/server_test.log 2>&1
echo "server_test rc=$? at $(el) s"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED  \]' $o/server_test.log | tail -12
echo "end at $(el) s"
