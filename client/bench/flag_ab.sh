#!/usr/bin/env bash
# A/B of normsvc flag sets against the echo server: each repetition runs the
# echo, then normsvc once per flag set, with the same three loads (1x4096 and
# 16x4096 fp32 at 64 in flight, 1x4096 at 1 in flight; normload, 8
# channels, on loopback), so every variant is measured beside the echo of
# the same repetition. Writes OUT_DIR/rN/<variant>_<load>.json and prints
# summary.md (each ratio to the echo per repetition, and their medians):
#
#   client/bench/flag_ab.sh BIN_DIR OUT_DIR DURATION_S REPS 'FLAGS A' 'FLAGS B' ...
#
# e.g. client/bench/flag_ab.sh .gpu/bin OUT 5 3 '' '--overlap_min_bytes=0'
# (an empty flag set is the defaults). BIN_DIR as for service_vs_echo.sh.
set -euo pipefail
usage="usage: flag_ab.sh BIN_DIR OUT_DIR DURATION_S REPS FLAGS..."
bin=${1:?$usage}
out_root=${2:?$usage}
duration=${3:?$usage}
reps=${4:?$usage}
shift 4
(($# > 0)) || { echo "$usage" >&2; exit 2; }
variants=("$@")
mkdir -p "$out_root"
out=$out_root
port=50251
# shellcheck source=SCRIPTDIR/loopback_servers.sh
source "$(dirname "${BASH_SOURCE[0]}")/loopback_servers.sh"
one_row="op=layernorm,dtype=fp32,rows=1,hidden=4096,params=inline"
sixteen_rows="op=layernorm,dtype=fp32,rows=16,hidden=4096,params=inline"
load() {  # load NAME MIX CONCURRENCY
  "$normload" --target "127.0.0.1:$port" --mix "$2" --concurrency "$3" --channels 8 \
    --warmup_s 2 --duration_s "$duration" --quiet --json "$out/$1.json" >"$out/$1.txt" 2>&1 \
    || echo "run $1 failed: see $out/$1.txt" >&2
}
three_loads() {  # three_loads PREFIX
  load "$1_1x4096_c64" "$one_row" 64
  load "$1_16x4096_c64" "$sixteen_rows" 64
  load "$1_1x4096_c1" "$one_row" 1
}
for ((r = 1; r <= reps; ++r)); do
  out=$out_root/r$r
  mkdir -p "$out"
  port=$((port + 1)); start echo "$echo_server" --address=127.0.0.1:$port
  three_loads echo
  for i in "${!variants[@]}"; do
    port=$((port + 1))
    # shellcheck disable=SC2086  # a flag set is split into its flags
    start "v$i" "$normsvc" --grpc_address=127.0.0.1:$port --metrics_address=127.0.0.1:$((port + 1000)) ${variants[$i]}
    three_loads "v$i"
  done
  stop_server
  echo "repetition $r done" >&2
done
printf '%s\n' "${variants[@]}" >"$out_root/variants.txt"
python3 "$(dirname "${BASH_SOURCE[0]}")/summarize_flag_ab.py" "$out_root" | tee "$out_root/summary.md"
