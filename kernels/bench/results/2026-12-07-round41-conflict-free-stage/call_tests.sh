#!/usr/bin/env bash
# The tests of the build that lands rounds 39-41 (or 39-40): bundle .gpu
# with its tests/kernels/kernels_gpu_test. The whole suite (the staged
# realigning kernel against the shifting kernel bit for bit at 2, 3 and 4
# stages, one segment and tables of segments, among the rest), then memcheck
# and racecheck over the staged kernel's many-row and segment-table tests.
# Writes under $1 and packs it into $1.tgz.
set -u
out=${1:?usage: call_tests.sh OUT_DIR}
source kernels/bench/device_call.sh
call_begin "$out"
call_tests "$out" 300
call_sanitizers "$out" 'ForwardRealignStaged.Many*:ForwardRealignStaged.Groups*' 100
call_end "$out"
