#!/usr/bin/env bash
# kernels_gpu_test (with the new epsilon, special-row and mixed-dtype tests),
# memcheck of the new tests, and server_test, at the working tree's build.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
tar -C .gpu-h -xJf .gpu-h/bundle.tar.xz
o=$OUT/t; mkdir -p $o
finish() { tar czf $OUT/t.tgz -C $OUT t; echo "tarred at $(el) s"; }
trap finish EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; echo "cpus: $(nproc)"; } > $o/device.txt 2>&1
cat $o/device.txt
L=$PWD/.gpu-h/lib; B=.gpu-h/bin
LD_LIBRARY_PATH=$L timeout 280 $B/tests/kernels/kernels_gpu_test > $o/kernels_gpu_test.log 2>&1
echo "kernels_gpu_test rc=$? at $(el) s"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED  \]' $o/kernels_gpu_test.log | tail -12
grep -B3 -A12 "Failure" $o/kernels_gpu_test.log | head -80
NORMSVC_SERVER_BINARY=$PWD/$B/server/normsvc LD_LIBRARY_PATH=$L timeout 200 \
  $B/tests/server/server_test > $o/server_test.log 2>&1
echo "server_test rc=$? at $(el) s"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED  \]' $o/server_test.log | tail -8
CS=$(ls /usr/local/cuda/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
[ "$(el)" -lt 200 ] && LD_LIBRARY_PATH=$L timeout 60 $CS --tool memcheck $B/tests/kernels/kernels_gpu_test \
  --gtest_filter='ForwardEpsilon.*:BackwardArguments.*' > $o/memcheck.log 2>&1
echo "memcheck rc=$? at $(el) s"; grep -E "ERROR SUMMARY|PASSED|FAILED" $o/memcheck.log | tail -4
echo "end at $(el) s"
