#!/usr/bin/env bash
# Usage: run_with_tool.sh required TOOL -- COMMAND...
# Runs COMMAND when TOOL is on PATH; a missing tool (every one is installed
# by deploy/setup.sh --test, from deploy/packages-test.txt or
# tests/requirements.txt) fails the test with a message that says so.
set -euo pipefail
mode=$1 tool=$2
shift 2
[[ "${1:-}" == "--" ]] && shift
if [[ "$mode" != required ]]; then
  echo "run_with_tool.sh: unknown mode '$mode' (expected: required)" >&2
  exit 2
fi
if ! command -v "$tool" >/dev/null 2>&1; then
  echo "FAIL: $tool is not on PATH; install the test tools with deploy/setup.sh --test" >&2
  exit 1
fi
exec "$@"
