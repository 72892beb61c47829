#!/usr/bin/env bash
# Installs what is missing to build and test normsvc on Debian 12: the
# packages in deploy/packages.txt (and, with --test, the test-only ones in
# deploy/packages-test.txt). Idempotent: installs nothing when all are present.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lists=("$here/packages.txt")
if [[ "${1:-}" == "--test" ]]; then
  lists+=("$here/packages-test.txt")
fi
mapfile -t wanted < <(cat "${lists[@]}" 2>/dev/null | sed -e 's/#.*//' -e '/^\s*$/d')
missing=()
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#wanted[@]} packages present"
fi
if [[ "${1:-}" == "--test" ]]; then
  # Python test tools live in a virtual environment at .venv (Debian's
  # system Python refuses pip installs).
  root=$(cd "$here/.." && pwd)
  [[ -x "$root/.venv/bin/python" ]] || python3 -m venv "$root/.venv"
  "$root/.venv/bin/python" -m pip install -q --disable-pip-version-check -r "$root/tests/requirements.txt"
fi
