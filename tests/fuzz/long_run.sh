#!/usr/bin/env bash
# A long run of one fuzz target, then its new inputs merged into the
# committed corpus. The flags and sanitizer options are the ctest's
# (tests/fuzz/CMakeLists.txt); only the duration differs.
#
#   tests/fuzz/long_run.sh BUILD_DIR TARGET [SECONDS]    (default 600)
#   e.g. tests/fuzz/long_run.sh build/asan fuzz_kserve
#
# New inputs go to BUILD_DIR/tests/fuzz/long_TARGET (emptied first); the
# run's output to BUILD_DIR/tests/fuzz/long_TARGET.log. Afterwards
# `TARGET -merge=1 -use_counters=0 CORPUS SCRATCH` adds to
# tests/fuzz/corpus/TARGET only the inputs that reach code it does not reach
# yet (existing files, seeds and regress_* included, are kept). Without
# -use_counters=0 every new hit-count bucket of an edge keeps an input too
# (after 10 minutes, three to four times the files for the same edges).
# Exits non-zero when the run does.
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: $0 BUILD_DIR TARGET [SECONDS]" >&2
  exit 2
fi
build=$1
target=$2
seconds=${3:-600}
source_dir=$(cd "$(dirname "$0")" && pwd)
binary=$build/tests/fuzz/$target
corpus=$source_dir/corpus/$target
scratch=$build/tests/fuzz/long_$target
log=$build/tests/fuzz/long_$target.log
[[ -x $binary ]] || { echo "no $binary: build the target first" >&2; exit 2; }

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
corpus_size() { find "$1" -type f -printf '%s\n' | awk '{n++; b+=$1} END {print n+0 " files, " b+0 " bytes"}'; }

rm -rf "$scratch"
mkdir -p "$scratch"
echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "commit:  $(git -C "$source_dir" rev-parse --short HEAD)"
echo "corpus before: $(corpus_size "$corpus")"
command=("$binary" "$scratch" "$corpus" "-max_total_time=$seconds" -rss_limit_mb=2048
         -malloc_limit_mb=512 -timeout=10 -print_final_stats=1)
echo "command: ASAN_OPTIONS=$ASAN_OPTIONS UBSAN_OPTIONS=$UBSAN_OPTIONS ${command[*]}"
status=0
"${command[@]}" >"$log" 2>&1 || status=$?
grep -E '^#[0-9]+[[:space:]]+DONE|^stat::|^Done [0-9]+ runs' "$log" || true
if [[ $status -ne 0 ]] || grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log"; then
  echo "result:  FAILED (exit $status), see $log and the crash-*/leak-*/oom-* file it names"
  exit 1
fi
echo "result:  exit 0, no crash, no sanitizer report, no malloc-limit hit ($log)"
echo "new inputs: $(corpus_size "$scratch")"
"$binary" -merge=1 -use_counters=0 "$corpus" "$scratch" >"$log.merge" 2>&1
grep -E 'MERGE-OUTER: [0-9]+ new files' "$log.merge" || true
echo "corpus after:  $(corpus_size "$corpus")"
