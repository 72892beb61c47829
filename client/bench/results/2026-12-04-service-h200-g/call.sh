#!/usr/bin/env bash
# Echo and normsvc at 8, 16 and 32 load-generator channels: is the 12-core
# level the connections' (each HTTP/2 connection's work is serialized)?
set -uo pipefail
out=$1
mkdir -p "$out"
tar -C .gpu -xJf .gpu/bundle.tar.xz
for ch in 8 16 32; do
  CHANNELS=$ch VARIANTS="" LD_LIBRARY_PATH=$PWD/.gpu/lib timeout 150 \
    client/bench/thread_cpu.sh .gpu/bin "$out/ch$ch" 1 4 >"$out/ch$ch.log" 2>&1
  echo "channels $ch rc $?"; grep -E "c64 |c64x16 |c64r " "$out/ch$ch/summary.md" | cut -d'|' -f2-6,9-11
done
