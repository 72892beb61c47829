# Steps shared by the GPU machine's call scripts (kernels/bench/results/*/
# call*.sh), sourced from the repository root there:
#
#   source kernels/bench/device_call.sh
#   call_begin OUT_DIR                    # folder, bundle unpacked, device.txt
#   call_use_bundle DIR                   # DIR's bundle instead of .gpu's
#   call_ab_bundle DIR                    # DIR's bundle and .gpu/base's kernels library
#   call_forward_ab OUT_DIR PREFIX SHAPE...  # norm_bench forward, base and patched, twice
#   call_forward_table_ab OUT_DIR PREFIX     # the whole forward table, base and patched, twice
#   call_tests OUT_DIR SECONDS [ARGS...]  # kernels_gpu_test ARGS -> kernels_gpu_test.log
#   call_sanitizers OUT_DIR FILTER SECONDS  # memcheck and racecheck over FILTER
#   call_segment_tables OUT_DIR BENCH RUN SECONDS  # BENCH's bf16 forward table, both policies
#   call_end OUT_DIR                      # end time, OUT_DIR packed into OUT_DIR.tgz
#
# The bundle is .gpu (kernels/bench/pack_gpu_bundle.sh); `bin` names its
# binaries after call_begin. Each step appends its exit status to
# device.txt; a GPU call returns a limited number of files, hence the one
# archive.

# Unpacks DIR/bundle.tar.xz (pack_gpu_bundle.sh's) once, where there is one.
call_unpack() {
  local dir=$1
  if [[ ! -d $dir/bin && -f $dir/bundle.tar.xz ]]; then tar -C "$dir" -xJf "$dir/bundle.tar.xz"; fi
}

# Runs from DIR's bundle (pack_gpu_bundle.sh build-gpu DIR BINARY...): unpacks
# it, sets `bin` to its binaries and LD_LIBRARY_PATH to its libraries.
call_use_bundle() {
  local dir=$1
  call_unpack "$dir"
  bin=$dir/bin
  export LD_LIBRARY_PATH=$PWD/$dir/lib
}

call_begin() {
  local out=$1
  mkdir -p "$out"
  call_unpack .gpu
  export LD_LIBRARY_PATH=$PWD/.gpu/lib
  bin=.gpu/bin
  sanitizer=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
  { nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; echo "sanitizer: $sanitizer"; } \
    >"$out/device.txt" 2>&1
}

# For an A/B of a patch's kernels library against its base commit's: unpacks
# DIR/bundle.tar.xz (pack_gpu_bundle.sh build-gpu DIR BINARY...) and
# .gpu/base/.gpu-base.so.xz (the base build's libnormsvc_kernels.so, same
# ABI); sets `bin` to DIR's binaries, `patched_lib` and `base_lib` to the
# library paths that load either library, and LD_LIBRARY_PATH to the first.
call_ab_bundle() {
  local dir=$1
  call_unpack "$dir"
  if [[ ! -f .gpu/base/libnormsvc_kernels.so ]]; then
    xz -d -c .gpu/base/.gpu-base.so.xz >.gpu/base/libnormsvc_kernels.so
  fi
  patched_lib=$PWD/$dir/lib
  base_lib=$PWD/.gpu/base:$patched_lib
  export LD_LIBRARY_PATH=$patched_lib
  bin=$dir/bin
}

# One norm_bench forward run of `bin`'s benchmark: OUT_DIR NAME LIB DTYPE
# HIDDEN [FLAGS...]; prints its forward lines' op, rows, H, slots, row
# threads, microseconds and ratio to copy.
call_forward_run() {
  local out=$1 name=$2 lib=$3 dtype=$4 hidden=$5
  shift 5
  LD_LIBRARY_PATH=$lib timeout 40 "$bin/kernels/bench/norm_bench" --forward-only --dtype "$dtype" \
    --hidden "$hidden" "$@" --json "$out/$name.json" >"$out/$name.txt" 2>&1
  echo "$name exit $?: $(grep -E '^forward' "$out/$name.txt" | awk '{print $2, $4, $5, $7, $9, $12, $NF}' | tr '\n' ' ')"
}

# After call_ab_bundle: base and patched interleaved twice over each SHAPE
# ("dtype H" or "dtype H rows"), named PREFIX_build_dtype_H_run.
call_forward_ab() {
  local out=$1 prefix=$2 shape dtype hidden rows build lib run
  shift 2
  for run in 1 2; do
    for build in base patched; do
      lib=$patched_lib
      [[ $build == base ]] && lib=$base_lib
      for shape in "$@"; do
        read -r dtype hidden rows <<<"$shape"
        call_forward_run "$out" "${prefix}_${build}_${dtype}_${hidden}_$run" "$lib" "$dtype" \
          "$hidden" ${rows:+--elements $((rows * hidden))}
      done
    done
  done
}

# After call_ab_bundle: norm_bench --forward-only's whole table of base and
# patched interleaved twice, named PREFIX_build_run; OUT_DIR/PREFIX_summary.txt
# puts each shape's ratios to copy side by side (base, patched, base, patched).
call_forward_table_ab() {
  local out=$1 prefix=$2 build lib run name
  for run in 1 2; do
    for build in base patched; do
      lib=$patched_lib
      [[ $build == base ]] && lib=$base_lib
      name=${prefix}_${build}_$run
      LD_LIBRARY_PATH=$lib timeout 90 "$bin/kernels/bench/norm_bench" --forward-only \
        --json "$out/$name.json" >"$out/$name.txt" 2>&1
      echo "$name exit $?" | tee -a "$out/device.txt"
    done
  done
  local ratio='$1=="forward"{print $NF}'
  paste <(awk '$1=="forward"{print $2, $3, $5, $6, $7, $9}' "$out/${prefix}_base_1.txt") \
    <(awk "$ratio" "$out/${prefix}_base_1.txt") <(awk "$ratio" "$out/${prefix}_patched_1.txt") \
    <(awk "$ratio" "$out/${prefix}_base_2.txt") <(awk "$ratio" "$out/${prefix}_patched_2.txt") |
    tee "$out/${prefix}_summary.txt"
}

call_tests() {
  local out=$1 seconds=$2
  shift 2
  timeout "$seconds" $bin/tests/kernels/kernels_gpu_test "$@" >"$out/kernels_gpu_test.log" 2>&1
  echo "kernels_gpu_test $* exit $?" | tee -a "$out/device.txt"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran' "$out/kernels_gpu_test.log" | tail -n 12
}

# At 65,536 elements a case, so that the sanitizers finish in time.
call_sanitizers() {
  local out=$1 filter=$2 seconds=$3 tool
  for tool in memcheck racecheck; do
    NORMSVC_TEST_MAX_ELEMENTS=65536 timeout "$seconds" "$sanitizer" --tool $tool --error-exitcode 9 \
      $bin/tests/kernels/kernels_gpu_test --gtest_filter="$filter" >"$out/$tool.log" 2>&1
    echo "$tool exit $? ($(grep -cE '^========= (Invalid|Error|Race)' "$out/$tool.log") reports)" \
      | tee -a "$out/device.txt"
  done
}

# BENCH's bf16 forward table (every H, the small-batch and segment cases)
# under each realigning policy: the staged kernel for tables of segments,
# then the shifting kernel for everything; prints the realigned_segments lines.
call_segment_tables() {
  local out=$1 bench=$2 run=$3 seconds=$4 policy name
  for policy in staged shift; do
    name=table_${policy}_$run
    timeout "$seconds" "$bench" --forward-only --dtype bf16 --realign $policy \
      --json "$out/$name.json" >"$out/$name.txt" 2>&1
    echo "$name exit $?: $(grep -E '^realigned_segments' "$out/$name.txt" | tr -s ' ' | tr '\n' ';')"
  done
}

call_end() {
  local out=$1
  date -u >>"$out/device.txt"
  tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
}
