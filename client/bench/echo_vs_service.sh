#!/usr/bin/env bash
# The service's performance bar, measured in one run: normsvc and the gRPC
# echo baseline (normsvc_echo) driven by the same normload commands with the
# same payloads, on loopback. Prints a Markdown table and leaves the normload
# JSON of every run in OUT_DIR.
#
# usage: echo_vs_service.sh BIN_DIR OUT_DIR [extra normsvc flags...]
#   BIN_DIR holds normsvc, normsvc_echo and normload (e.g. a bundle's bin/
#   with server/ and client/ subfolders flattened, or a build tree: the
#   script looks in BIN_DIR, BIN_DIR/server and BIN_DIR/client).
# env: DURATION_S (default 10), WARMUP_S (default 2), CHANNELS (default 8)
set -euo pipefail
bin=${1:?usage: echo_vs_service.sh BIN_DIR OUT_DIR [normsvc flags...]}
out=${2:?usage: echo_vs_service.sh BIN_DIR OUT_DIR [normsvc flags...]}
shift 2
find_bin() { for d in "$bin" "$bin/server" "$bin/client"; do [[ -x "$d/$1" ]] && { echo "$d/$1"; return; }; done; echo "missing $1 under $bin" >&2; exit 1; }
normsvc=$(find_bin normsvc); echo_server=$(find_bin normsvc_echo); normload=$(find_bin normload)
duration=${DURATION_S:-10}; warmup=${WARMUP_S:-2}; channels=${CHANNELS:-8}
mkdir -p "$out"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

start_service() {  # extra flags...
  svc_port=$(free_port); metrics_port=$(free_port)
  "$normsvc" --grpc_address=127.0.0.1:$svc_port --metrics_address=127.0.0.1:$metrics_port "$@" \
    >>"$out/normsvc.log" 2>&1 &
  svc_pid=$!; pids+=($svc_pid); wait_port $svc_port
}
stop_service() { kill -TERM $svc_pid; wait $svc_pid || true; }

echo_port=$(free_port)
"$echo_server" --address=127.0.0.1:$echo_port >"$out/echo.log" 2>&1 &
pids+=($!); wait_port $echo_port
start_service "$@"

load() {  # name port channels args...
  local name=$1 port=$2 n_channels=$3; shift 3
  "$normload" --target 127.0.0.1:$port --quiet --channels "$n_channels" --warmup_s "$warmup" \
    --duration_s "$duration" --json "$out/$name.json" "$@" >"$out/$name.txt" 2>&1
}
one_row="op=layernorm,dtype=fp32,rows=1,hidden=4096"
sixteen_rows="op=layernorm,dtype=fp32,rows=16,hidden=4096"
for side in echo service; do
  port=$([[ $side == echo ]] && echo $echo_port || echo $svc_port)
  load ${side}_16k_c64 $port "$channels" --concurrency 64 --mix "$one_row"
  load ${side}_256k_c64 $port "$channels" --concurrency 64 --mix "$sixteen_rows"
  load ${side}_16k_c1 $port 1 --concurrency 1 --mix "$one_row"
done
stop_service
start_service "$@" --max_batch_rows=1
load service_16k_c64_batch1 $svc_port "$channels" --concurrency 64 --mix "$one_row"
stop_service

python3 - "$out" <<'PY'
import json, sys, os
out = sys.argv[1]
def m(name):
    d = json.load(open(os.path.join(out, name + ".json")))
    return d["measured"]
rows = [("1x4096 fp32 (16 KiB), 64 in flight", "16k_c64"),
        ("16x4096 fp32 (256 KiB), 64 in flight", "256k_c64"),
        ("1x4096 fp32, 1 in flight", "16k_c1")]
print("| load | echo req/s | service req/s | service/echo | echo GB/s | service GB/s | echo p50 / p99 ms | service p50 / p99 ms |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for label, key in rows:
    e, s = m("echo_" + key), m("service_" + key)
    print(f"| {label} | {e['req_per_s']:.0f} | {s['req_per_s']:.0f} | {s['req_per_s']/e['req_per_s']:.2f} | "
          f"{e['gb_per_s']:.2f} | {s['gb_per_s']:.2f} | {e['latency_ms']['p50']:.3f} / {e['latency_ms']['p99']:.3f} | "
          f"{s['latency_ms']['p50']:.3f} / {s['latency_ms']['p99']:.3f} |")
b, s = m("service_16k_c64_batch1"), m("service_16k_c64")
print(f"\nbatching: 1-row requests at 64 in flight: {s['req_per_s']:.0f} req/s with batching, "
      f"{b['req_per_s']:.0f} req/s with --max_batch_rows=1 ({s['req_per_s']/b['req_per_s']:.1f}x)")
errors = sum(json.load(open(os.path.join(out, f)))["totals"]["errors"] for f in os.listdir(out) if f.endswith(".json"))
print(f"errors over all runs: {errors}")
PY
