#!/usr/bin/env bash
# Usage: run_with_tool.sh required|optional TOOL -- COMMAND...
# Runs COMMAND when TOOL is on PATH. A missing required tool (one that
# deploy/packages-test.txt installs) fails the test; a missing optional one
# (kubectl, which no Debian package provides here) skips it with exit 77,
# the tests' SKIP_RETURN_CODE.
set -euo pipefail
mode=$1 tool=$2
shift 2
[[ "${1:-}" == "--" ]] && shift
if ! command -v "$tool" >/dev/null 2>&1; then
  if [[ "$mode" == required ]]; then
    echo "FAIL: $tool is not on PATH; install the test packages with deploy/setup.sh --test" >&2
    exit 1
  fi
  echo "SKIP: $tool is not on PATH (kubectl 1.32 is expected on the build machine; it is not a Debian package here)"
  exit 77
fi
exec "$@"
