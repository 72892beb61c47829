#!/usr/bin/env bash
# server_test of HEAD, then thread_cpu.sh with batching variants.
set -uo pipefail
out=$1
mkdir -p "$out"
tar -C .gpu -xJf .gpu/bundle.tar.xz
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; echo "cpus: $(nproc)"; } >"$out/device.txt" 2>&1
NORMSVC_SERVER_BINARY=$PWD/.gpu/bin/server/normsvc LD_LIBRARY_PATH=$PWD/.gpu/lib timeout 150 \
  .gpu/bin/tests/server/server_test >"$out/server_test.log" 2>&1
echo "server_test rc $?"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran' "$out/server_test.log" | tail -n 6
date -u >>"$out/device.txt"
VARIANTS="bif1=--batches_in_flight=1;rt0=--reply_threads=0;rpt4=--replies_per_thread=4" \
VARIANT_LOADS="c64 c64x16 c1" LD_LIBRARY_PATH=$PWD/.gpu/lib timeout 400 \
  client/bench/thread_cpu.sh .gpu/bin "$out/tc" 3 4 >"$out/tc.log" 2>&1
echo "thread_cpu rc $?"
date -u >>"$out/device.txt"
cat "$out/tc/summary.md"
