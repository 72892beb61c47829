#!/usr/bin/env bash
# Where the service's CPU goes, against the echo of the same bytes: the CPU
# time each thread group of the server (grouped by thread name, from
# /proc/PID/task/*/stat) spends per request, under service_vs_echo.sh's
# loads (fp32 LayerNorm, 8 channels unless CHANNELS says), for the echo, normsvc with its
# defaults and normsvc with other flags (VARIANTS), interleaved REPS times.
# With BEFORE_NORMSVC (another build of normsvc) that build runs too, as
# "before", between the echo and normsvc: an A/B of two builds on one
# machine instance. Loopback only; each server is started and stopped here.
#
# usage: thread_cpu.sh BIN_DIR OUT_DIR [REPS] [DURATION_S] [BEFORE_NORMSVC]
#   BIN_DIR holds normsvc, normsvc_echo and normload (any layout below it).
# CHANNELS (environment): the load generator's channels (connections),
# default 8 as in service_vs_echo.sh.
# Loads (the run name's suffix): c64 and c1 (1x4096, gamma and beta inline,
# 64 and 1 in flight), c64r (1x4096 with registered gamma and beta: 16 KiB
# each way), c64x16 and c64x16r (16x4096, inline and registered), c64s
# (c64 over NormalizeStream: one stream a channel); LOADS (environment,
# space-separated) picks the loads every server runs, default "c64 c1 c64r
# c64x16 c64x16r"; the variants run the loads VARIANT_LOADS names (default
# "c64 c64r c1").
# VARIANTS (environment): servers to run beside the defaults, as
# "NAME=FLAGS" entries separated by ';' (FLAGS split at spaces); default
# "nospin=--idle_spin_us=0" (the idle spin off; its default turns it on on
# hosts of 8 or more usable CPUs).
# Writes OUT_DIR/<server><rep>.<load>.{json,t0,t1,s0,s1} (normload's JSON,
# thread ticks and context switches before and after, the host's CPU ticks
# from /proc/stat before and after), OUT_DIR/host_cpus (the host's CPU
# count) and OUT_DIR/summary.md. The host's
# figures say whether the machine was saturated (busy cores against its
# count) and what the rest of it (the load generator, mostly) spent a
# request beside the server.
set -euo pipefail
usage="usage: thread_cpu.sh BIN_DIR OUT_DIR [REPS] [DURATION_S] [BEFORE_NORMSVC]"
bin=${1:?$usage}
out=${2:?$usage}
reps=${3:-2}
duration=${4:-4}
before=${5:-}
variants=${VARIANTS-nospin=--idle_spin_us=0}
variant_loads=${VARIANT_LOADS-c64 c64r c1}
channels=${CHANNELS:-8}
[[ $channels =~ ^[1-9][0-9]*$ ]] || { echo "thread_cpu: CHANNELS must be a positive integer" >&2; exit 1; }
[[ -z $before || -x $before ]] || { echo "thread_cpu: $before is not an executable" >&2; exit 1; }
known_loads="c64 c1 c64r c64x16 c64x16r c64s"  # named_load's names
all_loads=${LOADS-c64 c1 c64r c64x16 c64x16r}  # what every_load runs, in this order
for load_name in $all_loads $variant_loads; do  # refuse a misspelt load before any run
  [[ " $known_loads " == *" $load_name "* ]] || {
    echo "thread_cpu: unknown load '$load_name' in LOADS or VARIANT_LOADS" >&2; exit 1; }
done
mkdir -p "$out"
grep -c '^cpu[0-9]' /proc/stat >"$out/host_cpus"  # the host's CPUs, for the busy-core figures
port=50251
# shellcheck source=SCRIPTDIR/loopback_servers.sh
source "$(dirname "${BASH_SOURCE[0]}")/loopback_servers.sh"
# Clock ticks (utime + stime) and context switches (voluntary: the thread
# slept, a hand-off or a wait; involuntary: preempted) of each thread group
# of the server, by name: "NAME TICKS VOLUNTARY INVOLUNTARY".
thread_ticks() {
  local task name fields switches
  for task in /proc/"$server_pid"/task/*; do
    name=$(tr ' ' '_' <"$task/comm" 2>/dev/null) || continue
    fields=$(sed 's/^.*) //' "$task/stat" 2>/dev/null) || continue
    switches=$(awk '/^voluntary_ctxt_switches/ {v = $2} /^nonvoluntary_ctxt_switches/ {n = $2}
      END {print v + 0, n + 0}' "$task/status" 2>/dev/null) || continue
    # After "pid (comm) ": field 1 is state, 12 utime, 13 stime.
    awk -v n="$name" -v s="$switches" '{print n, $12 + $13, s}' <<<"$fields"
  done | awk '{t[$1] += $2; v[$1] += $3; c[$1] += $4} END {for (n in t) print n, t[n], v[n], c[n]}' | sort
}
load() {  # load RUN_NAME CONCURRENCY ROWS PARAMS [TRANSPORT]
  thread_ticks >"$out/$1.t0"
  head -1 /proc/stat >"$out/$1.s0"
  "$normload" --target "127.0.0.1:$port" \
    --mix "op=layernorm,dtype=fp32,rows=$3,hidden=4096,params=$4,transport=${5:-unary}" \
    --concurrency "$2" --channels "$channels" --warmup_s 1 --duration_s "$duration" --quiet \
    --json "$out/$1.json" >"$out/$1.txt" 2>&1 || echo "run $1 failed: see $1.txt" >&2
  head -1 /proc/stat >"$out/$1.s1"
  thread_ticks >"$out/$1.t1"
}
named_load() {  # named_load SERVER_RUN_PREFIX LOAD_NAME
  case $2 in
    c64) load "$1.c64" 64 1 inline ;;
    c1) load "$1.c1" 1 1 inline ;;
    c64r) load "$1.c64r" 64 1 registered ;;
    c64x16) load "$1.c64x16" 64 16 inline ;;
    c64x16r) load "$1.c64x16r" 64 16 registered ;;
    c64s) load "$1.c64s" 64 1 inline stream ;;
  esac
}
every_load() {  # every_load SERVER_RUN_PREFIX
  local name
  for name in $all_loads; do named_load "$1" "$name"; done
}
for rep in $(seq 1 "$reps"); do
  port=$((port + 1)); start "echo$rep" "$echo_server" --address=127.0.0.1:$port
  every_load "echo$rep"
  if [[ -n $before ]]; then
    port=$((port + 1)); start "before$rep" "$before" --grpc_address=127.0.0.1:$port --metrics_address=127.0.0.1:$((port + 1000))
    every_load "before$rep"
  fi
  port=$((port + 1)); start "normsvc$rep" "$normsvc" --grpc_address=127.0.0.1:$port --metrics_address=127.0.0.1:$((port + 1000))
  every_load "normsvc$rep"
  IFS=';' read -r -a variant_list <<<"$variants"
  for variant in "${variant_list[@]}"; do
    [[ -n $variant ]] || continue
    name=${variant%%=*}
    read -r -a flags <<<"${variant#*=}"
    port=$((port + 1)); start "$name$rep" "$normsvc" --grpc_address=127.0.0.1:$port --metrics_address=127.0.0.1:$((port + 1000)) \
      "${flags[@]}"
    for load_name in $variant_loads; do named_load "$name$rep" "$load_name"; done
  done
done
stop_server
python3 "$(dirname "${BASH_SOURCE[0]}")/summarize_thread_cpu.py" "$out" "$(getconf CLK_TCK)" | tee "$out/summary.md"
