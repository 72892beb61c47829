#!/bin/bash
# Growth of a CPU-backend normsvc's resident high-water mark (VmHWM) over a
# burst of large requests, with and without gRPC's memory quota: the
# measurement behind server/README.md's paragraph on the quota.
#
# usage: client/bench/burst_memory.sh BUILD_DIR OUT.json [RUNS] [QUOTA ...]
#   BUILD_DIR  a build tree with server/normsvc and client/normload
#   OUT.json   one JSON object per run, one per line
#   RUNS       runs per quota and concurrency (default 3)
#   QUOTA      --grpc_memory_quota_bytes values (default: 0 -1, i.e. none and
#              the default, --max_queued_bytes + --max_receive_message_bytes)
# Each run: a fresh server on loopback (--max_queued_bytes 32 MiB,
# --max_receive_message_bytes 64 MiB), VmHWM read, then normload sends 8 MiB
# requests (rows=32, hidden=65536, fp32) for 2 s from 96 and then 192
# clients on 16 connections, VmHWM read again, the server stopped (SIGTERM).
# Prints one table row per run.
set -euo pipefail
if [[ $# -lt 2 || "$1" == "--help" ]]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
build=$1
out=$2
runs=${3:-3}
shift $(($# < 3 ? $# : 3))
quotas=("$@")
[[ ${#quotas[@]} -gt 0 ]] || quotas=(0 -1)
mib=$((1 << 20))
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
: > "$out"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

printf '%-10s %-11s %-4s %-14s %-4s %s\n' quota concurrency run growth_MiB ok errors_by_code
for quota in "${quotas[@]}"; do
  for concurrency in 96 192; do
    for run in $(seq 1 "$runs"); do
      port=$(free_port)
      "$build/server/normsvc" --backend=cpu --grpc_address="127.0.0.1:$port" \
        --metrics_address=127.0.0.1:0 --max_queued_bytes=$((32 * mib)) \
        --max_receive_message_bytes=$((64 * mib)) --grpc_memory_quota_bytes="$quota" \
        --memory_release_interval_s=0 > "$scratch/server.log" 2>&1 &
      server=$!
      for _ in $(seq 1 100); do
        (echo > "/dev/tcp/127.0.0.1/$port") 2> /dev/null && break
        sleep 0.1
      done
      before=$(hwm_kib "$server")
      "$build/client/normload" --target="127.0.0.1:$port" --concurrency="$concurrency" \
        --channels=16 --warmup_s=0 --duration_s=2 --quiet --max_error_rate=1 --verify \
        --mix "rows=32,hidden=65536" --variants=1 --deadline_ms=30000 \
        --json="$scratch/run.json" > /dev/null 2>&1
      after=$(hwm_kib "$server")
      kill -TERM "$server"
      wait "$server" || { echo "the server exited $? (log: below)" >&2; cat "$scratch/server.log" >&2; exit 1; }
      python3 - "$scratch/run.json" "$quota" "$concurrency" "$run" "$before" "$after" "$out" <<'EOF'
import json, sys
path, quota, concurrency, run, before, after, out = sys.argv[1:]
measured = json.load(open(path))["measured"]
row = {"quota": int(quota), "concurrency": int(concurrency), "run": int(run),
       "hwm_before_kib": int(before), "hwm_after_kib": int(after),
       "growth_mib": (int(after) - int(before)) // 1024, "ok": measured["ok"],
       "errors_by_code": measured["errors_by_code"],
       "verify_failures": measured["verify_failures"]}
print(f'{row["quota"]:<10} {row["concurrency"]:<11} {row["run"]:<4} {row["growth_mib"]:<14} '
      f'{row["ok"]:<4} {json.dumps(row["errors_by_code"])}')
with open(out, "a") as f:
    f.write(json.dumps(row) + "\n")
EOF
    done
  done
done
