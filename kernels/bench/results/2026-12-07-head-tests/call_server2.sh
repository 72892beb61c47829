#!/usr/bin/env bash
# server_test of HEAD against the bundled normsvc, as call_server.sh, with
# DrainGateTest's count read after its clients are joined (its one failure
# in run-h100/server/: a refused TryEnter counts itself in for a moment).
# Bundle: as call2.sh's (.gpu/ht2). Writes under $1, packs it into $1.tgz.
set -u
out=${1:?usage: call_server2.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
call_use_bundle .gpu/ht2
NORMSVC_SERVER_BINARY=$PWD/$bin/server/normsvc timeout 240 $bin/tests/server/server_test \
  >"$out/server_test.log" 2>&1
echo "server_test exit $?" | tee -a "$out/device.txt"
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/server_test.log" | tail -n 6
call_end "$out"
