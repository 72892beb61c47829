#!/usr/bin/env bash
# Fills DEST (default: .pa at the repository root, which this script tells
# git to ignore) with a perf_analyzer that runs on a machine without a
# package registry: the binary the pinned tritonclient wheel carries, the
# CUDA 12 runtime from the nvidia-cuda-runtime-cu12 wheel (both versions
# read from tests/requirements.txt), Debian's libb64, and the OpenSSL and
# zlib it was linked against. The C library, libstdc++ and libgcc stay out:
# the target machine's own are newer (the binary needs glibc 2.34).
#
# usage: prep_perf_analyzer.sh [DEST]
#   then: LD_LIBRARY_PATH=DEST/lib DEST/bin/perf_analyzer --version
# Needs pip (the test venv's, else python3's) reaching PyPI, and libb64-0d
# installed (deploy/setup.sh --test installs it).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dest=${1:-$root/.pa}
requirements=$root/tests/requirements.txt
pin() {  # the "name==version" line of tests/requirements.txt
  local line
  line=$(grep -E "^$1(\[[a-z,]+\])?==" "$requirements" | head -n 1)
  [[ -n "$line" ]] || { echo "prep: no '$1==' pin in $requirements" >&2; exit 1; }
  echo "$1==${line#*==}"
}
triton=$(pin tritonclient)
cudart=$(pin nvidia-cuda-runtime-cu12)
python=$root/.venv/bin/python
[[ -x "$python" ]] || python=python3
b64=/usr/lib/x86_64-linux-gnu/libb64.so.0d
[[ -e "$b64" ]] || { echo "prep: $b64 missing: apt-get install libb64-0d" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip download -q --no-deps --only-binary=:all: \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 \
  --python-version 3 -d "$work/wheels" "$triton" "$cudart"
for wheel in "$work"/wheels/*.whl; do
  "$python" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
    "$wheel" "$work/x"
done
binary=$(find "$work/x" -type f -name perf_analyzer | head -n 1)
runtime=$(find "$work/x" -name 'libcudart.so.12' | head -n 1)
[[ -n "$binary" && -n "$runtime" ]] || { echo "prep: perf_analyzer or libcudart.so.12 not in the wheels" >&2; exit 1; }

rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib"
cp "$binary" "$dest/bin/perf_analyzer"
chmod +x "$dest/bin/perf_analyzer"
strip "$dest/bin/perf_analyzer" 2>/dev/null || true  # 17 MB -> 13 MB
cp -L "$runtime" "$b64" "$dest/lib/"
skip='/(libc|libm|libpthread|libdl|librt|libutil|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so'
LD_LIBRARY_PATH=$dest/lib ldd "$dest/bin/perf_analyzer" | awk '$3 ~ /^\// {print $3}' |
  grep -v -E "$skip" | grep -v -F "$dest/lib/" | while read -r lib; do cp -L "$lib" "$dest/lib/"; done
if LD_LIBRARY_PATH=$dest/lib ldd "$dest/bin/perf_analyzer" | grep -q 'not found'; then
  echo "prep: unresolved libraries:" >&2
  LD_LIBRARY_PATH=$dest/lib ldd "$dest/bin/perf_analyzer" | grep 'not found' >&2
  exit 1
fi
version=$(LD_LIBRARY_PATH=$dest/lib "$dest/bin/perf_analyzer" --version 2>&1 | head -n 1)
printf '%s\nfrom %s, %s, libb64-0d (Debian)\n' "$version" "$triton" "$cudart" >"$dest/VERSION"

# Keep it out of git (it travels as an ignored folder).
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  exclude=$(git -C "$root" rev-parse --git-path info/exclude)
  [[ "$exclude" = /* ]] || exclude=$root/$exclude
  rel=${dest#"$root"/}
  if [[ "$rel" != /* ]] && ! grep -qxF "/$rel/" "$exclude" 2>/dev/null; then
    mkdir -p "$(dirname "$exclude")"
    echo "/$rel/" >>"$exclude"
  fi
fi
du -sh "$dest" | awk -v v="$version" '{print "prep: " v ", " $1 " in " $2}'
