#!/usr/bin/env bash
# Where the batch threads' CPU goes: a build with per-phase thread CPU
# timers (phase.patch), one server per run, under 1x4096 inline, 1x4096
# registered and 16x4096 inline at 64 in flight, with its defaults and two
# wait variants.
set -u
tar -C .gpu -xJf .gpu/bundle.tar.xz
r=$OUT/r; mkdir -p $r
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; nproc; } > $r/device.txt 2>&1
export LD_LIBRARY_PATH=$PWD/.gpu/lib
load=.gpu/bin/client/normload
port=50400
for variant in "defaults" "block --gpu_wait=block" "nospin --idle_spin_us=0"; do
  name=${variant%% *}; flags=${variant#$name}
  for mix in "c64 1 inline" "c64r 1 registered" "c64x16 16 inline"; do
    set -- $mix
    port=$((port+1)); run=$name.$1
    .gpu/phase/normsvc --grpc_address=127.0.0.1:$port --metrics_address=127.0.0.1:$((port+1000)) $flags > $r/$run.server.log 2>&1 &
    pid=$!
    for i in $(seq 50); do $load --target 127.0.0.1:$port --concurrency 1 --warmup_s 0 --duration_s 0.05 --quiet --mix op=layernorm,dtype=fp32,rows=1,hidden=8 >/dev/null 2>&1 && break; sleep 0.1; done
    $load --target 127.0.0.1:$port --mix "op=layernorm,dtype=fp32,rows=$2,hidden=4096,params=$3" --concurrency 64 --channels 8 --warmup_s 1 --duration_s 4 --quiet --json $r/$run.json > $r/$run.txt 2>&1
    kill -TERM $pid; wait $pid
    echo "== $run $(grep -h throughput $r/$run.txt)"; grep phase_cpu $r/$run.server.log
  done
done
date -u >> $r/device.txt
tar czf $OUT/r.tgz -C $OUT r
