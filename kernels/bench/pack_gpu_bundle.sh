#!/usr/bin/env bash
# Packs what a GPU run needs into one compressed archive that travels to the
# GPU machine with the checkout. The gpu preset builds the kernels as one
# shared library (NORMSVC_SHARED_KERNELS), so their device code (about 50
# MB for sm_90) is in the bundle once and the whole bundle is about 22 MB
# with xz; a build with the kernels static puts a copy in every binary
# linked with them (about 7 MB each with xz).
#
#   kernels/bench/pack_gpu_bundle.sh BUILD_DIR [DEST [BINARY...]]   (here; DEST defaults to .gpu)
#
# BINARY...: paths in the build tree that replace the default list below,
# for a call that needs only some of them (a call carries at most 64 MiB,
# the checkout included), e.g.
#   kernels/bench/pack_gpu_bundle.sh build-gpu .gpu tests/kernels/kernels_gpu_test kernels/bench/norm_bench
#
# BUILD_DIR: a Release build made here for sm_90 (cmake --preset gpu, then
# cmake --build build-gpu). Writes DEST/bundle.tar.xz holding bin/<path in the
# build tree> for the GPU tests, the benchmarks, the server and its tests,
# the load generator and the echo server (client/bench/service_vs_echo.sh
# .gpu/bin OUT), and lib/ with the shared libraries they load that the GPU machine lacks
# (libnormsvc_kernels.so, gRPC, protobuf, Abseil, prometheus-cpp, the CUDA
# runtime, ...; not the C library, libstdc++ or the CUDA driver). On the GPU machine, from the repository root:
#
#   tar -C .gpu -xJf .gpu/bundle.tar.xz
#   LD_LIBRARY_PATH=$PWD/.gpu/lib .gpu/bin/tests/kernels/kernels_gpu_test
#
# (kernels/bench/device_round.sh and tests/gpu/compute_sanitizer.sh unpack
# it themselves when .gpu/bin is missing.)
set -euo pipefail
build=${1:?usage: pack_gpu_bundle.sh BUILD_DIR [DEST [BINARY...]]}
dest=${2:-.gpu}
binaries=(kernels/bench/norm_bench kernels/bench/plan_occupancy kernels/bench/round_trip_bench
          tests/kernels/kernels_gpu_test
          tests/server/server_test server/normsvc client/normload client/normsvc_echo)
if (($# > 2)); then binaries=("${@:3}"); fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
skip='/(libc|libm|libpthread|libdl|librt|libutil|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcuda|libnvidia-ml)\.so'
for rel in "${binaries[@]}"; do
  if [[ ! -x $build/$rel ]]; then
    echo "pack_gpu_bundle: $build/$rel is missing (build it first)" >&2
    exit 2
  fi
  mkdir -p "$stage/bin/$(dirname "$rel")"
  cp "$build/$rel" "$stage/bin/$rel"
  ldd "$build/$rel" | awk '$3 ~ /^\// {print $3}' | { grep -v -E "$skip" || true; }
done | sort -u | while read -r lib; do cp -L "$lib" "$stage/lib/"; done
mkdir -p "$dest"
tar -C "$stage" -cf - bin lib | xz -T0 -6 >"$dest/bundle.tar.xz"
du -h "$dest/bundle.tar.xz" | awk '{print "pack_gpu_bundle: " $2 " " $1 " (a call carries at most 64 MiB)"}'
