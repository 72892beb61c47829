#!/usr/bin/env bash
# One call on the GPU machine for the service: server_test against the
# bundled normsvc, then (only if it passes) the performance bar's table,
# service_vs_echo.sh with REPS repetitions. Run from the repository root
# there, after building here and bundling:
#   cmake --preset gpu && cmake --build build-gpu -j2
#   kernels/bench/pack_gpu_bundle.sh build-gpu      (then carry .gpu)
#
#   client/bench/device_service_round.sh OUT_DIR [REPS] [DURATION_S]
#
# Writes device.txt, server_test.log and service/ (service_vs_echo.sh's
# files and summary.md) under OUT_DIR, then packs OUT_DIR into OUT_DIR.tgz
# and removes the folder (a GPU call returns a limited number of files:
# loose ones past it are lost). server_test is time-boxed (200 s);
# with the defaults (3 repetitions of 5 s loads, about 100 s each) the
# whole call takes about 6 minutes.
set -uo pipefail
out=${1:?usage: device_service_round.sh OUT_DIR [REPS] [DURATION_S]}
reps=${2:-3}
duration=${3:-5}
mkdir -p "$out"
# A bundle packed by pack_gpu_bundle.sh is unpacked first.
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
lib=$PWD/.gpu/lib
{
  nvidia-smi --query-gpu=name,driver_version --format=csv
  date -u
  echo "cpus: $(nproc)"
} >"$out/device.txt" 2>&1
NORMSVC_SERVER_BINARY=$PWD/.gpu/bin/server/normsvc LD_LIBRARY_PATH=$lib timeout 200 \
  .gpu/bin/tests/server/server_test >"$out/server_test.log" 2>&1
rc=$?
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran' "$out/server_test.log" | tail -n 12
pack() { tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"; }
if [ "$rc" -ne 0 ]; then
  tail -n 40 "$out/server_test.log"
  echo "server_test failed (exit $rc): the service benchmark was not run"
  pack
  exit "$rc"
fi
LD_LIBRARY_PATH=$lib client/bench/service_vs_echo.sh .gpu/bin "$out/service" "$duration" "$reps" \
  >"$out/service.log" 2>&1
rc=$?
tail -n 20 "$out/service/summary.md" 2>/dev/null || tail -n 20 "$out/service.log"
pack
exit "$rc"
