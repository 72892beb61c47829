#!/usr/bin/env bash
# compute-sanitizer over the GPU tests, on the GPU machine, in one call.
#
# Build for sm_90 and gather the test binaries under .gpu/bin (at their paths
# in the build tree) and the shared libraries they load under .gpu/lib, then
# on the GPU machine, from the repository root:
#
#   tests/gpu/compute_sanitizer.sh OUT_DIR               # the four tools below
#   tests/gpu/compute_sanitizer.sh OUT_DIR racecheck-all # racecheck, every kernel test
#
# Runs, each time-boxed so the whole call stays under about 9 minutes:
#   memcheck   (with --leak-check full)  kernels_gpu_test (all tests), server_test GPU tests
#              but the fault-injection one (its CUDA error is deliberate)
#   racecheck  (shared-memory hazards)   kernels_gpu_test (a reduced filter), server_test GPU tests
#   initcheck  (reads of uninitialized device memory)  kernels_gpu_test (reduced filter)
#   synccheck  (barrier misuse)                        kernels_gpu_test (reduced filter)
# racecheck-all runs every kernels_gpu_test test under racecheck (about 4
# minutes), with the test matrices capped at CS_MAX_ELEMENTS (default 65536)
# elements a case through NORMSVC_TEST_MAX_ELEMENTS: every H, dtype, op and
# variant still runs, with fewer rows.
# Writes OUT_DIR/<tool>.<binary>.log (sanitizer and test output together),
# OUT_DIR/device.txt and OUT_DIR/summary.txt: one line per run,
#   <tool> <binary>: <N> errors, tests <passed>/<run> passed, exit <rc>, <seconds> s [TIMEOUT]
# and a last line "compute-sanitizer: CLEAN" or "compute-sanitizer: NOT CLEAN".
# Exit status 0 only when every run finished, reported 0 errors and its tests passed.
#
# Environment overrides (optional):
#   CS_KERNEL_FILTER_FULL     gtest filter for the memcheck run of kernels_gpu_test (default *)
#   CS_KERNEL_FILTER_REDUCED  gtest filter for the other tools' kernels_gpu_test runs
#   CS_SERVER_FILTER          gtest filter of server_test's GPU tests
#   CS_TIMEOUT_<TOOL>         seconds per kernels_gpu_test run of that tool (e.g. CS_TIMEOUT_RACECHECK)
#   CS_SERVER_TIMEOUT         seconds per server_test run
#   COMPUTE_SANITIZER         path of compute-sanitizer
set -uo pipefail
out=${1:?usage: compute_sanitizer.sh OUT_DIR [racecheck-all]}
mode=${2:-tools}
mkdir -p "$out"
sanitizer=${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
# A bundle packed by kernels/bench/pack_gpu_bundle.sh is unpacked first.
if [[ ! -d .gpu/bin && -f .gpu/bundle.tar.xz ]]; then tar -C .gpu -xJf .gpu/bundle.tar.xz; fi
lib=$PWD/.gpu/lib
kernels_test=.gpu/bin/tests/kernels/kernels_gpu_test
server_test=.gpu/bin/tests/server/server_test
summary=$out/summary.txt
: >"$summary"

if [[ ! -x $sanitizer ]]; then
  echo "compute-sanitizer: not found at $sanitizer (set COMPUTE_SANITIZER)" | tee -a "$summary"
  exit 2
fi
needed=("$kernels_test")
[[ $mode == racecheck-all ]] || needed+=("$server_test")
for binary in "${needed[@]}"; do
  if [[ ! -x $binary ]]; then
    echo "compute-sanitizer: $binary missing (bundle the build into .gpu first)" | tee -a "$summary"
    exit 2
  fi
done
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
  "$sanitizer" --version 2>&1 | tail -n 2
} >"$out/device.txt"

full_filter=${CS_KERNEL_FILTER_FULL:-*}
# One forward and one backward dtype of each op, the option and special-row
# tests, and the mixed batch: every kernel family, at a fraction of the time.
reduced_filter=${CS_KERNEL_FILTER_REDUCED:-*ForwardMatrix*layer*bf16*:*ForwardMatrix*rms*f32*:*BackwardMatrix*layer*f16*:*BackwardMatrix*rms*bf16*:ForwardOptions.*:ForwardSpecialRows.*:ForwardBatchInvariance.MixedLaunch*:BackwardArguments.*:ForwardArguments.*}
server_filter=${CS_SERVER_FILTER:-GpuExecutor*:GpuBackend*:GpuMetrics*:*cuda*}
server_timeout=${CS_SERVER_TIMEOUT:-60}
all_clean=1

# run TOOL BINARY FILTER TIMEOUT [extra sanitizer flags...]
run() {
  local tool=$1 binary=$2 filter=$3 limit=$4
  shift 4
  local name
  name=$(basename "$binary")
  local log=$out/$tool.$name.log
  local start=$SECONDS
  LD_LIBRARY_PATH=$lib timeout --signal=INT --kill-after=15 "$limit" \
    "$sanitizer" --tool "$tool" --error-exitcode 86 --require-cuda-init no --print-limit 200 "$@" \
    "$binary" --gtest_filter="$filter" >"$log" 2>&1
  local rc=$?
  local seconds=$((SECONDS - start))
  local errors
  # memcheck, initcheck and synccheck end with "ERROR SUMMARY: N errors",
  # racecheck with "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)".
  errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+|RACECHECK SUMMARY: .*\([0-9]+ errors' "$log" | tail -n 1 |
    grep -Eo '[0-9]+( errors)?$' | grep -Eo '^[0-9]+')
  local run_count passed
  run_count=$(grep -Eo '^\[==========\] [0-9]+ tests? from [0-9]+ test suites? ran' "$log" |
    grep -Eo '^\[==========\] [0-9]+' | grep -Eo '[0-9]+$')
  passed=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$log" | grep -Eo '[0-9]+$')
  local skipped
  skipped=$(grep -Eo '^\[  SKIPPED \] [0-9]+' "$log" | grep -Eo '[0-9]+$')
  local note=""
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    note=" TIMEOUT (incomplete: raise CS_TIMEOUT_${tool^^} or narrow the filter)"
  fi
  printf '%-9s %-17s: %s errors, tests %s/%s passed (%s skipped), exit %d, %d s%s\n' \
    "$tool" "$name" "${errors:-?}" "${passed:-0}" "${run_count:-?}" "${skipped:-0}" "$rc" \
    "$seconds" "$note" | tee -a "$summary"
  if [[ $rc -ne 0 || "${errors:-x}" != 0 ]]; then all_clean=0; fi
}

if [[ $mode == racecheck-all ]]; then
  export NORMSVC_TEST_MAX_ELEMENTS=${CS_MAX_ELEMENTS:-65536}
  run racecheck "$kernels_test" "*" "${CS_TIMEOUT_RACECHECK_ALL:-420}" --racecheck-report all
  unset NORMSVC_TEST_MAX_ELEMENTS
else
  run memcheck "$kernels_test" "$full_filter" "${CS_TIMEOUT_MEMCHECK:-180}" --leak-check full
  # The fault-injection test makes a CUDA call fail on purpose (memcheck reports
  # that call and the cudaGetLastError that clears it): left out of memcheck,
  # kept in racecheck.
  run memcheck "$server_test" "$server_filter:-GpuExecutorTest.InjectedCudaError*" "$server_timeout" \
    --leak-check full
  run racecheck "$kernels_test" "$reduced_filter" "${CS_TIMEOUT_RACECHECK:-120}" \
    --racecheck-report all
  run racecheck "$server_test" "$server_filter" "$server_timeout" --racecheck-report all
  run initcheck "$kernels_test" "$reduced_filter" "${CS_TIMEOUT_INITCHECK:-60}"
  run synccheck "$kernels_test" "$reduced_filter" "${CS_TIMEOUT_SYNCCHECK:-45}"
fi

if [[ $all_clean -eq 1 ]]; then
  echo "compute-sanitizer: CLEAN" | tee -a "$summary"
  exit 0
fi
echo "compute-sanitizer: NOT CLEAN (see $out/*.log)" | tee -a "$summary"
exit 1
