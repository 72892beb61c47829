#!/usr/bin/env bash
# perf_analyzer (KServe v2 / Triton protocol, model layernorm) against
# normload (normsvc.v1) on the same normsvc, same loads, same run, on
# loopback: a closed-loop concurrency sweep for 1x4096 and 16x4096 FP32
# LayerNorm with GAMMA and BETA sent inline by both. Writes into OUT_DIR
# the raw outputs (perf_analyzer's CSV per shape via -f and its text per
# point; normload's sweep CSV and JSON), the server's /metrics and log,
# and summary.md (req/s, p50, p99 per concurrency, side by side).
#
# usage: kserve_sweep.sh BIN_DIR OUT_DIR
#   BIN_DIR  holds normsvc and normload (any layout below it: a build
#            folder, or bundle.sh's DEST/bin); when BIN_DIR/../lib exists
#            (bundle.sh's DEST/lib) it is their LD_LIBRARY_PATH
# environment (defaults for the H200 machine; about 3 minutes in all):
#   KSERVE_SWEEP_PA_DIR       perf_analyzer in PA_DIR/bin, its libraries in
#                             PA_DIR/lib (default: .pa at the repository
#                             root, filled by prep_perf_analyzer.sh)
#   KSERVE_SWEEP_CONCURRENCY  comma-separated (default 1,2,4,...,256)
#   KSERVE_SWEEP_ROWS         rows per request, space-separated (default "1 16")
#   KSERVE_SWEEP_BACKEND      normsvc --backend (default cuda)
#   KSERVE_SWEEP_WINDOW_MS    perf_analyzer measurement window (default 1000)
#   KSERVE_SWEEP_NORMLOAD_S   normload measurement per point (default 2; 0.5 s warm-up)
#   KSERVE_SWEEP_PA_FLAGS     extra perf_analyzer flags (default --async: in-flight
#                             requests on a few threads, as normload does; empty
#                             for its synchronous mode, one thread per request)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:?usage: kserve_sweep.sh BIN_DIR OUT_DIR}
out=${2:?usage: kserve_sweep.sh BIN_DIR OUT_DIR}
pa_dir=${KSERVE_SWEEP_PA_DIR:-$root/.pa}
concurrency=${KSERVE_SWEEP_CONCURRENCY:-1,2,4,8,16,32,64,128,256}
rows_list=${KSERVE_SWEEP_ROWS:-1 16}
backend=${KSERVE_SWEEP_BACKEND:-cuda}
window_ms=${KSERVE_SWEEP_WINDOW_MS:-1000}
normload_s=${KSERVE_SWEEP_NORMLOAD_S:-2}
pa_flags=${KSERVE_SWEEP_PA_FLAGS-"--async"}
hidden=4096
mkdir -p "$out"
out=$(cd "$out" && pwd)

find_bin() { find "$bin" -type f -name "$1" -perm -u+x | head -n 1; }
normsvc=$(find_bin normsvc)
normload=$(find_bin normload)
perf_analyzer=$pa_dir/bin/perf_analyzer
for b in "$normsvc" "$normload" "$perf_analyzer"; do
  [[ -x "$b" ]] || { echo "kserve_sweep: missing binary (normsvc, normload under $bin; $perf_analyzer)" >&2; exit 1; }
done
lib_dir=""
[[ -d "$bin/../lib" ]] && lib_dir=$(cd "$bin/../lib" && pwd)
# Library paths per command, never for python3 (its own OpenSSL is newer).
run_bin() { LD_LIBRARY_PATH=${lib_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"; }
run_pa() { LD_LIBRARY_PATH=$pa_dir/lib${lib_dir:+:$lib_dir} "$perf_analyzer" "$@"; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

port=$(free_port)
metrics_port=$(free_port)
server_pid=""
stop_server() {
  if [[ -n "$server_pid" ]]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  server_pid=""
}
trap stop_server EXIT

{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "host: $(hostname), $(nproc) cores"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/gpu: /'
  echo "perf_analyzer: $(run_pa --version 2>&1 | head -n 1) flags: ${pa_flags:-none}"
  echo "normsvc: $normsvc --backend=$backend"
  echo "concurrency: $concurrency; rows: $rows_list; hidden: $hidden; pa window: ${window_ms} ms; normload: ${normload_s} s per point"
} | tee "$out/run.txt"

run_bin "$normsvc" --grpc_address="127.0.0.1:$port" --metrics_address="127.0.0.1:$metrics_port" \
  --backend="$backend" >"$out/normsvc.log" 2>&1 &
server_pid=$!
ready=0
for _ in $(seq 1 150); do
  if run_bin "$normload" --target "127.0.0.1:$port" --concurrency 1 --warmup_s 0 --duration_s 0.05 \
    --quiet --mix "op=layernorm,dtype=fp32,rows=1,hidden=8" >/dev/null 2>&1; then
    ready=1
    break
  fi
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.2
done
((ready)) || { echo "kserve_sweep: normsvc did not come up; see $out/normsvc.log" >&2; exit 1; }

for rows in $rows_list; do
  shape="${rows}x${hidden}"
  # perf_analyzer: one process per concurrency, so a point that does not
  # settle cannot end the sweep; such a point is measured again with any
  # spread accepted and marked unstable.
  combined="$out/perf_analyzer_${shape}.csv"
  rm -f "$combined" "$out"/pa_"${shape}"_c*.unstable
  for c in ${concurrency//,/ }; do
    csv="$out/pa_${shape}_c${c}.csv"
    args=(-m layernorm -i grpc -u "127.0.0.1:$port" --shape "INPUT:${rows},${hidden}"
      --shape "GAMMA:${hidden}" --shape "BETA:${hidden}" --concurrency-range "${c}:${c}"
      --measurement-interval "$window_ms" -f "$csv")
    # shellcheck disable=SC2206
    extra=($pa_flags)
    if ! run_pa "${args[@]}" "${extra[@]}" --stability-percentage 20 --max-trials 6 \
      >"$out/pa_${shape}_c${c}.txt" 2>&1 || [[ ! -s "$csv" ]]; then
      run_pa "${args[@]}" "${extra[@]}" --stability-percentage 1000 --max-trials 3 \
        >>"$out/pa_${shape}_c${c}.txt" 2>&1 && touch "$out/pa_${shape}_c${c}.unstable" ||
        echo "kserve_sweep: perf_analyzer ${shape} concurrency ${c} failed: see pa_${shape}_c${c}.txt" >&2
    fi
    if [[ -s "$csv" ]]; then
      [[ -s "$combined" ]] || head -n 1 "$csv" >"$combined"
      tail -n +2 "$csv" >>"$combined"
    fi
    echo "perf_analyzer ${shape} c=${c}: $(tail -n +2 "$csv" 2>/dev/null | cut -d, -f2) infer/s"
  done
  # normload: the same loads through normsvc.v1 Normalize.
  run_bin "$normload" --target "127.0.0.1:$port" --channels 8 --quiet \
    --mix "op=layernorm,dtype=fp32,rows=${rows},hidden=${hidden},params=inline" \
    --sweep "concurrency=${concurrency}" --warmup_s 0.5 --duration_s "$normload_s" \
    --csv "$out/normload_${shape}.csv" --json "$out/normload_${shape}.json" \
    >"$out/normload_${shape}.txt" 2>&1 ||
    echo "kserve_sweep: normload ${shape} failed: see normload_${shape}.txt" >&2
  echo "normload ${shape}: done"
done

python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
  "http://127.0.0.1:$metrics_port/metrics" >"$out/metrics.txt" || true
stop_server
python3 "$here/summarize_kserve_sweep.py" "$out" | tee "$out/summary.md"
