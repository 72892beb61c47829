#!/usr/bin/env bash
set -u
tar -C .gpu -xJf .gpu/bundle.tar.xz
mkdir -p $OUT/r; date -u > $OUT/r/device.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $OUT/r/device.txt
NORMSVC_SERVER_BINARY=$PWD/.gpu/bin/server/normsvc LD_LIBRARY_PATH=$PWD/.gpu/lib timeout 170 .gpu/bin/tests/server/server_test > $OUT/r/server_test.log 2>&1
echo "rc $?"; date -u >> $OUT/r/device.txt
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/r/server_test.log | head
