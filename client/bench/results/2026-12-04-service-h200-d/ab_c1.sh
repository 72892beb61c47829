#!/usr/bin/env bash
# 1 in flight: the echo, normsvc (one batch in 16 timed) and normsvc timing every batch, interleaved.
set -euo pipefail
bin=.gpu/bin; out=${1:?}; mkdir -p "$out"; port=50351
source client/bench/loopback_servers.sh
load() { "$normload" --target "127.0.0.1:$port" --mix "op=layernorm,dtype=fp32,rows=1,hidden=4096,params=inline" \
  --concurrency 1 --channels 8 --warmup_s 1 --duration_s 4 --quiet --json "$out/$1.json" > "$out/$1.txt" 2>&1; }
for rep in 1 2 3 4 5; do
  port=$((port + 1)); start "echo$rep" "$echo_server" --address=127.0.0.1:$port; load "echo$rep"
  port=$((port + 1)); start "sampled$rep" "$normsvc" --grpc_address=127.0.0.1:$port --metrics_address=; load "sampled$rep"
  port=$((port + 1)); start "every$rep" "$normsvc" --grpc_address=127.0.0.1:$port --metrics_address= --timed_batch_interval=1; load "every$rep"
done
stop_server
python3 - "$out" <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    m = json.load(open(f))["measured"]
    print(f.split("/")[-1], "%.0f req/s p50 %.3f ms p99 %.3f ms" % (m["req_per_s"], m["latency_ms"]["p50"], m["latency_ms"]["p99"]))
PY
