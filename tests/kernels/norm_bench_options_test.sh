#!/usr/bin/env bash
# norm_bench's command line, which it reads before any CUDA call (so this runs
# without a GPU): --help names every flag the parser takes and exits 0; a bad
# value, a missing value or an unknown flag exits 2 with a message naming it.
#
#   norm_bench_options_test.sh NORM_BENCH
set -u
bench=${1:?usage: norm_bench_options_test.sh NORM_BENCH}
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

help=$("$bench" --help 2>&1)
rc=$?
[[ $rc == 0 ]] || fail "--help exited $rc"
for flag in --json --iterations --quick --forward-only --backward-only --backward-dx-only \
  --hidden --dtype --ring --param_staging --realign --backward-realign --elements --affine \
  --residual --column-reduce --discard-partials; do
  grep -q -- "$flag" <<<"$help" || fail "--help does not name $flag"
done
grep -q -- "bf16|fp32|fp16" <<<"$help" || fail "--help does not list fp16 for --dtype"

# ARGS... must exit 2 with WORDS in its message: refused WORDS -- ARGS...
refused() {
  local words=$1
  shift 2
  local message rc
  message=$("$bench" "$@" 2>&1)
  rc=$?
  [[ $rc == 2 ]] || fail "$* exited $rc, not 2"
  grep -qF -- "$words" <<<"$message" || fail "$*: no '$words' in: $message"
}
refused "--dtype takes bf16, fp32 or fp16, not fp64" -- --dtype fp64
refused "--discard-partials takes on or off, not maybe" -- --discard-partials maybe
refused "--column-reduce" -- --column-reduce sideways
refused "--iterations must be at least 1" -- --iterations 0
refused "--no-such-flag" -- --no-such-flag value
refused "value is missing" -- --hidden

if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "norm_bench options: --help and every refusal as expected"
