#!/usr/bin/env bash
# The service's performance bar: normsvc against the minimal gRPC echo server
# (normsvc_echo), same payloads, same load generator (normload), same run,
# on loopback. Writes one JSON per run and summary.md into OUT.
#
# usage: service_vs_echo.sh BIN_DIR OUT_DIR [DURATION_S] [REPS]
#   BIN_DIR holds normsvc, normsvc_echo and normload (any layout below it).
#   REPS > 1 runs the whole sequence that many times, into OUT_DIR/r1,
#   r2, ...; summary.md then has each repetition's table and the median of
#   each ratio over them (each ratio is within one repetition: a machine
#   whose speed drifts between runs moves one repetition, not the median).
set -euo pipefail
usage="usage: service_vs_echo.sh BIN_DIR OUT_DIR [DURATION_S] [REPS]"
bin=${1:?$usage}
out_root=${2:?$usage}
duration=${3:-5}
reps=${4:-1}
[[ $reps =~ ^[1-9][0-9]*$ ]] || { echo "service_vs_echo: REPS must be a positive integer" >&2; exit 2; }
out=$out_root
mkdir -p "$out"
port=50151
# shellcheck source=SCRIPTDIR/loopback_servers.sh
source "$(dirname "${BASH_SOURCE[0]}")/loopback_servers.sh"
load() {  # load RUN_NAME MIX CONCURRENCY [extra normload flags]
  local run=$1 mix=$2 conc=$3; shift 3
  "$normload" --target "127.0.0.1:$port" --mix "$mix" --concurrency "$conc" --channels 8 \
    --warmup_s 2 --duration_s "$duration" --quiet --json "$out/$run.json" "$@" >"$out/$run.txt" 2>&1 \
    || echo "run $run failed: see $run.txt" >&2
}
one_row="op=layernorm,dtype=fp32,rows=1,hidden=4096,params=inline"
sixteen_rows="op=layernorm,dtype=fp32,rows=16,hidden=4096,params=inline"
# The same with gamma and beta registered once and named in each request:
# the request is the tensor alone (16 KiB for one row), as the issue's echo
# baseline of 16 KiB messages was measured.
one_row_registered="op=layernorm,dtype=fp32,rows=1,hidden=4096,params=registered"
sixteen_rows_registered="op=layernorm,dtype=fp32,rows=16,hidden=4096,params=registered"

# One repetition: every run, echo first, into $out.
one_repetition() {
  port=$((port + 1)); start echo "$echo_server" --address=127.0.0.1:$port
  load echo_1x4096_c64 "$one_row" 64
  load echo_16x4096_c64 "$sixteen_rows" 64
  load echo_1x4096_c1 "$one_row" 1
  load echo_1x4096r_c64 "$one_row_registered" 64
  load echo_16x4096r_c64 "$sixteen_rows_registered" 64

  # The bar runs do not verify responses: the echo runs pay no such client
  # work, and checking every response against the CPU reference costs the load
  # generator's threads more than the echo's whole request. The *_verified runs
  # repeat two loads with --verify (every response checked) for correctness.
  port=$((port + 1)); start normsvc "$normsvc" --grpc_address=127.0.0.1:$port --metrics_address=127.0.0.1:$((port + 1000))
  load normsvc_1x4096_c64 "$one_row" 64
  load normsvc_16x4096_c64 "$sixteen_rows" 64
  load normsvc_1x4096_c1 "$one_row" 1
  load normsvc_1x4096r_c64 "$one_row_registered" 64
  load normsvc_16x4096r_c64 "$sixteen_rows_registered" 64
  load normsvc_1x4096_c64_verified "$one_row" 64 --verify
  load normsvc_16x4096_c64_verified "$sixteen_rows" 64 --verify

  # The idle spin off (--idle_spin_us=0; by default it is on where the process
  # may use 8 or more CPUs, as on the GPU host): what it buys at 1 in flight.
  port=$((port + 1)); start normsvc_nospin "$normsvc" --grpc_address=127.0.0.1:$port --metrics_address=127.0.0.1:$((port + 1000)) --idle_spin_us=0
  load normsvc_nospin_1x4096_c1 "$one_row" 1

  port=$((port + 1)); start normsvc_rows1 "$normsvc" --grpc_address=127.0.0.1:$port --metrics_address=127.0.0.1:$((port + 1000)) --max_batch_rows=1
  load normsvc_rows1_1x4096_c64 "$one_row" 64
}

for rep in $(seq 1 "$reps"); do
  if [[ $reps -gt 1 ]]; then out=$out_root/r$rep; mkdir -p "$out"; fi
  one_repetition
done
stop_server

python3 "$(dirname "${BASH_SOURCE[0]}")/summarize_service_bench.py" "$out_root" | tee "$out_root/summary.md"
