#!/usr/bin/env bash
# Where the service's CPU goes, against the echo of the same bytes: the CPU
# time each thread group of the server (grouped by thread name, from
# /proc/PID/task/*/stat) spends per request, under the same load as
# service_vs_echo.sh (1x4096 fp32 with inline gamma/beta, 64 and 1 in
# flight, 8 channels), for the echo, normsvc with its defaults and normsvc
# with --idle_spin_us=500, interleaved REPS times. Loopback only; each server
# is started and stopped here.
#
# usage: thread_cpu.sh BIN_DIR OUT_DIR [REPS] [DURATION_S]
#   BIN_DIR holds normsvc, normsvc_echo and normload (any layout below it).
# Writes OUT_DIR/<server><rep>.c<conc>.{json,t0,t1} (normload's JSON, thread
# ticks before and after) and OUT_DIR/summary.md.
set -euo pipefail
bin=${1:?usage: thread_cpu.sh BIN_DIR OUT_DIR [REPS] [DURATION_S]}
out=${2:?usage: thread_cpu.sh BIN_DIR OUT_DIR [REPS] [DURATION_S]}
reps=${3:-2}
duration=${4:-4}
mkdir -p "$out"
port=50251
# shellcheck source=SCRIPTDIR/loopback_servers.sh
source "$(dirname "${BASH_SOURCE[0]}")/loopback_servers.sh"
# Clock ticks (utime + stime) of each thread group of the server, by name.
thread_ticks() {
  local task name fields
  for task in /proc/"$server_pid"/task/*; do
    name=$(tr ' ' '_' <"$task/comm" 2>/dev/null) || continue
    fields=$(sed 's/^.*) //' "$task/stat" 2>/dev/null) || continue
    # After "pid (comm) ": field 1 is state, 12 utime, 13 stime.
    awk -v n="$name" '{print n, $12 + $13}' <<<"$fields"
  done | awk '{t[$1] += $2} END {for (n in t) print n, t[n]}' | sort
}
load() {  # load RUN_NAME CONCURRENCY
  thread_ticks >"$out/$1.t0"
  "$normload" --target "127.0.0.1:$port" --mix "op=layernorm,dtype=fp32,rows=1,hidden=4096,params=inline" \
    --concurrency "$2" --channels 8 --warmup_s 1 --duration_s "$duration" --quiet \
    --json "$out/$1.json" >"$out/$1.txt" 2>&1 || echo "run $1 failed: see $1.txt" >&2
  thread_ticks >"$out/$1.t1"
}
for rep in $(seq 1 "$reps"); do
  port=$((port + 1)); start "echo$rep" "$echo_server" --address=127.0.0.1:$port
  load "echo$rep.c64" 64; load "echo$rep.c1" 1
  port=$((port + 1)); start "normsvc$rep" "$normsvc" --grpc_address=127.0.0.1:$port --metrics_address=127.0.0.1:$((port + 1000))
  load "normsvc$rep.c64" 64; load "normsvc$rep.c1" 1
  port=$((port + 1)); start "spin$rep" "$normsvc" --grpc_address=127.0.0.1:$port --metrics_address=127.0.0.1:$((port + 1000)) \
    --idle_spin_us=500
  load "spin$rep.c64" 64; load "spin$rep.c1" 1
done
stop_server
python3 "$(dirname "${BASH_SOURCE[0]}")/summarize_thread_cpu.py" "$out" "$(getconf CLK_TCK)" | tee "$out/summary.md"
