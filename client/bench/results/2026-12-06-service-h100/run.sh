#!/usr/bin/env bash
# The service against the gRPC echo, one repetition of 5 s loads (client/bench/service_vs_echo.sh).
set -u
cd "$(dirname "$0")"
mkdir -p g && tar -C g -xJf bundle.tar.xz
o=$OUT
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; echo "cpus: $(nproc)"; } > $o/device.txt; cat $o/device.txt
LD_LIBRARY_PATH=$PWD/g/lib timeout 200 ../client/bench/service_vs_echo.sh g/bin $o/service 5 1 > $o/service.log 2>&1
echo "service_vs_echo rc=$?"; cat $o/service/summary.md 2>/dev/null | head -40
tar -C $o -czf /tmp/s.tgz service && rm -rf $o/service && mv /tmp/s.tgz $o/service.tgz
