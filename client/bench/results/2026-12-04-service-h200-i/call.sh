#!/usr/bin/env bash
# Run-queue waits (schedstat) of normsvc's threads under 1x4096 x 64 for
# its defaults and three flag variants, twice each, interleaved.
set -uo pipefail
out=$1
mkdir -p "$out"
tar -C .gpu -xJf .gpu/bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
snap() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{a += $1; b += $2; n++} END {print a + 0, b + 0, n + 0}'; }
port=50500
for rep in 1 2; do
for variant in "defaults" "--reply_threads=0" "--gpu_wait=spin" "--idle_spin_us=0"; do
  port=$((port + 1))
  flags=(); [[ $variant == defaults ]] || flags=("$variant")
  .gpu/bin/server/normsvc --grpc_address=127.0.0.1:$port --metrics_address=127.0.0.1:$((port + 1000)) "${flags[@]}" >"$out/server.$port.log" 2>&1 &
  spid=$!
  sleep 1.5
  .gpu/bin/client/normload --target 127.0.0.1:$port --mix "op=layernorm,dtype=fp32,rows=1,hidden=4096,params=inline" \
    --concurrency 64 --channels 8 --warmup_s 1 --duration_s 4 --quiet --json "$out/load.$port.json" >"$out/load.$port.txt" 2>&1 &
  cpid=$!
  sleep 2
  s0=$(snap $spid); c0=$(snap $cpid)
  sleep 2
  s1=$(snap $spid); c1=$(snap $cpid)
  wait $cpid
  kill -TERM $spid; wait $spid
  rps=$(grep -oE "throughput +[0-9]+" "$out/load.$port.txt" | grep -oE "[0-9]+$")
  awk -v name="$variant" -v rep=$rep -v rps="$rps" -v s0="$s0" -v s1="$s1" -v c0="$c0" -v c1="$c1" 'BEGIN {
    split(s0, a); split(s1, b); split(c0, c); split(c1, d);
    printf "| %s | %d | %s | %.2f | %.2f | %d | %.2f | %.2f |\n", name, rep, rps,
      (b[1]-a[1])/2e9, (b[2]-a[2])/2e9, b[3], (d[1]-c[1])/2e9, (d[2]-c[2])/2e9 }' | tee -a "$out/summary.md"
done
done
