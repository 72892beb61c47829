#!/usr/bin/env bash
# HEAD (2f94688: the server unchanged since 2060c60, the kernels of rounds
# 42b and 44c) on the GPU machine, in one call: the whole kernels_gpu_test
# of the landed kernels, then client/bench/device_service_round.sh
# (server_test against the bundled normsvc, then the performance bar's
# table, two repetitions of 5 s loads). Bundle: kernels/bench/pack_gpu_bundle.sh
# build-gpu .gpu/svc tests/server/server_test server/normsvc client/normload
# client/normsvc_echo tests/kernels/kernels_gpu_test (18 MB). Writes
# $1/kernels.tgz and $1/service.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR}
mkdir -p "$out"
[[ -f .gpu/bundle.tar.xz ]] || cp .gpu/svc/bundle.tar.xz .gpu/bundle.tar.xz
source kernels/bench/device_call.sh
call_begin "$out/kernels"
call_tests "$out/kernels" 200 --gtest_filter='*'
call_end "$out/kernels"
client/bench/device_service_round.sh "$out/service" 2 5
