#!/usr/bin/env bash
# Rounds 42b, 44c and 45 on the GPU machine, from one bundle: the build of
# all three (.gpu/r45: pack_gpu_bundle.sh build-gpu .gpu/r45
# tests/kernels/kernels_gpu_test kernels/bench/norm_bench) and the kernels
# library of 247abd9, before them (.gpu/base/.gpu-base.so.xz), which
# norm_bench loads in place of the patched one for the A/B runs (same ABI).
#
#   call.sh OUT check   the whole kernels_gpu_test; memcheck and racecheck
#                       over ForwardBatchInvariance.* (round 42b's test);
#                       round 44c's long rows, base and patched interleaved twice
#   call.sh OUT lean    the tests, memcheck over round 42b's test, both A/Bs on
#                       their main shapes, one row with a residual (about 4 min)
#   call.sh OUT bench   round 45's realigned H, interleaved twice; rows with a
#                       residual (norm_bench --residual) and the bf16 forward
#                       table (segments, small batches), once each
#
# Round 45 changes only plans of H not a multiple of the vector width, round
# 44c only rows of whole chunks past 8,192 chunks, round 42b only launches
# of segment tables: each A/B's shapes see one round. Writes under $1, packs
# it into $1.tgz.
set -u
out=${1:?usage: call.sh OUT_DIR check|bench|lean}
mode=${2:?usage: call.sh OUT_DIR check|bench|lean}
source kernels/bench/device_call.sh
call_begin "$out"
if [[ ! -d .gpu/r45/bin ]]; then tar -C .gpu/r45 -xJf .gpu/r45/bundle.tar.xz; fi
if [[ ! -f .gpu/base/libnormsvc_kernels.so ]]; then
  xz -d -c .gpu/base/.gpu-base.so.xz >.gpu/base/libnormsvc_kernels.so
fi
patched_lib=$PWD/.gpu/r45/lib
base_lib=$PWD/.gpu/base:$patched_lib
export LD_LIBRARY_PATH=$patched_lib
bin=.gpu/r45/bin
bench=$bin/kernels/bench/norm_bench

# One norm_bench forward run: NAME LIB DTYPE HIDDEN [FLAGS...].
forward_run() {
  local name=$1 lib=$2 dtype=$3 hidden=$4
  shift 4
  LD_LIBRARY_PATH=$lib timeout 40 "$bench" --forward-only --dtype "$dtype" --hidden "$hidden" "$@" \
    --json "$out/$name.json" >"$out/$name.txt" 2>&1
  echo "$name exit $?: $(grep -E '^forward' "$out/$name.txt" | awk '{print $2, $4, $5, $7, $9, $12, $NF}' | tr '\n' ' ')"
}

# Base and patched interleaved twice over SHAPES ("dtype H [rows]" each).
ab_runs() {
  local prefix=$1 shape dtype hidden rows build lib run
  shift
  for run in 1 2; do
    for build in base patched; do
      lib=$patched_lib
      [[ $build == base ]] && lib=$base_lib
      for shape in "$@"; do
        read -r dtype hidden rows <<<"$shape"
        if [[ -n $rows ]]; then
          forward_run "${prefix}_${build}_${dtype}_${hidden}_$run" "$lib" "$dtype" "$hidden" \
            --elements $((rows * hidden))
        else
          forward_run "${prefix}_${build}_${dtype}_${hidden}_$run" "$lib" "$dtype" "$hidden"
        fi
      done
    done
  done
}

if [[ $mode == lean ]]; then
  # Both parts' essentials, for a call with little device time: the tests,
  # memcheck over round 42b's test, each A/B on its main shapes.
  call_tests "$out" 200 --gtest_filter='*'
  NORMSVC_TEST_MAX_ELEMENTS=65536 timeout 90 "$sanitizer" --tool memcheck --error-exitcode 9 \
    $bin/tests/kernels/kernels_gpu_test --gtest_filter='ForwardBatchInvariance.*' \
    >"$out/memcheck.log" 2>&1
  echo "memcheck exit $? ($(grep -cE '^========= (Invalid|Error)' "$out/memcheck.log") reports)" \
    | tee -a "$out/device.txt"
  ab_runs r45 "bf16 2049" "fp32 2049" "bf16 4095" "bf16 1023"
  ab_runs r44c "fp32 65536 256" "bf16 131072 128" "bf16 65536 256" "fp32 32768 512"
  for build in base patched; do
    lib=$patched_lib
    [[ $build == base ]] && lib=$base_lib
    forward_run "residual_${build}_bf16_2049" "$lib" bf16 2049 --residual
  done
elif [[ $mode == check ]]; then
  call_tests "$out" 240 --gtest_filter='*'
  call_sanitizers "$out" 'ForwardBatchInvariance.*' 150
  ab_runs r44c "fp32 65536 256" "fp32 49152 341" "bf16 131072 128" "bf16 98304 170" \
    "bf16 65536 256" "fp32 32768 512"
else
  ab_runs r45 "bf16 2049" "fp32 2049" "bf16 4095" "fp32 4095" "bf16 8191" "bf16 1023"
  # Rows with a residual: the shifting kernel (3 slots in the base, 4-5
  # patched), and the variant that gives them the general kernel past three
  # slots (.gpu/r45g/.gpu-r45g.so.xz, when carried).
  if [[ -f .gpu/r45g/.gpu-r45g.so.xz && ! -f .gpu/r45g/libnormsvc_kernels.so ]]; then
    xz -d -c .gpu/r45g/.gpu-r45g.so.xz >.gpu/r45g/libnormsvc_kernels.so
  fi
  for build in base patched general; do
    lib=$patched_lib
    [[ $build == base ]] && lib=$base_lib
    if [[ $build == general ]]; then
      [[ -f .gpu/r45g/libnormsvc_kernels.so ]] || continue
      lib=$PWD/.gpu/r45g:$patched_lib
    fi
    for shape in "bf16 2049" "fp32 2049" "bf16 4095"; do
      read -r dtype hidden <<<"$shape"
      forward_run "residual_${build}_${dtype}_${hidden}" "$lib" "$dtype" "$hidden" --residual
    done
    [[ $build == general ]] && continue
    LD_LIBRARY_PATH=$lib timeout 90 "$bench" --forward-only --dtype bf16 \
      --json "$out/table_$build.json" >"$out/table_$build.txt" 2>&1
    echo "table_$build exit $?: $(grep -E '^(realigned|multi_segment|small)' "$out/table_$build.txt" | tr -s ' ' | tr '\n' ';')"
  done
fi
call_end "$out"
