#!/usr/bin/env bash
# Run-queue waits of the server's and the load generator's threads at 64 in
# flight (/proc/PID/task/*/schedstat: ns on a CPU, ns runnable but waiting
# for one), over 2 s of a 1x4096 load, for the echo and normsvc.
set -uo pipefail
out=$1
mkdir -p "$out"
tar -C .gpu -xJf .gpu/bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib
snap() {  # snap PID: "on_cpu_ns wait_ns threads" summed over its threads
  cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{a += $1; b += $2; n++} END {print a + 0, b + 0, n + 0}'
}
port=50400
for server in echo normsvc; do
  port=$((port + 1))
  if [[ $server == echo ]]; then
    .gpu/bin/client/normsvc_echo --address=127.0.0.1:$port >"$out/$server.log" 2>&1 &
  else
    .gpu/bin/server/normsvc --grpc_address=127.0.0.1:$port --metrics_address=127.0.0.1:$((port + 1000)) >"$out/$server.log" 2>&1 &
  fi
  spid=$!
  sleep 2
  .gpu/bin/client/normload --target 127.0.0.1:$port --mix "op=layernorm,dtype=fp32,rows=1,hidden=4096,params=inline" \
    --concurrency 64 --channels 8 --warmup_s 1 --duration_s 5 --quiet --json "$out/$server.json" >"$out/$server.load.txt" 2>&1 &
  cpid=$!
  sleep 2.5
  s0=$(snap $spid); c0=$(snap $cpid); h0=$(head -1 /proc/stat)
  sleep 2
  s1=$(snap $spid); c1=$(snap $cpid); h1=$(head -1 /proc/stat)
  wait $cpid
  kill -TERM $spid; wait $spid
  awk -v name=$server -v s0="$s0" -v s1="$s1" -v c0="$c0" -v c1="$c1" 'BEGIN {
    split(s0, a); split(s1, b); split(c0, c); split(c1, d);
    printf "%s: server on-CPU %.2f cores, runnable-waiting %.2f threads, %d threads; load generator on-CPU %.2f cores, runnable-waiting %.2f threads, %d threads\n",
      name, (b[1]-a[1])/2e9, (b[2]-a[2])/2e9, b[3], (d[1]-c[1])/2e9, (d[2]-c[2])/2e9, d[3] }' | tee -a "$out/summary.txt"
  echo "$server /proc/stat: $h0 | $h1" >>"$out/summary.txt"
  grep -E "throughput" "$out/$server.load.txt" | tee -a "$out/summary.txt"
done
