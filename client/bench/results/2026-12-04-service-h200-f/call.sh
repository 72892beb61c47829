#!/usr/bin/env bash
# The CPU the host lets this container use, then the bar's table at HEAD.
set -uo pipefail
out=$1
mkdir -p "$out"
{
  echo "nproc: $(nproc)"
  grep Cpus_allowed_list /proc/self/status
  for f in /sys/fs/cgroup/cpu.max /sys/fs/cgroup/cpu.weight /sys/fs/cgroup/cpuset.cpus.effective /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us; do
    [[ -r $f ]] && echo "$f: $(cat $f)"
  done
  cat /proc/self/cgroup
  s0=$(head -1 /proc/stat)
  for i in $(seq 16); do timeout 3 sh -c 'while :; do :; done' & done; wait
  s1=$(head -1 /proc/stat)
  echo "16 busy loops for 3 s, /proc/stat cpu line before and after:"; echo "$s0"; echo "$s1"
} >"$out/cpu.txt" 2>&1
cat "$out/cpu.txt"
client/bench/device_service_round.sh "$out/round" 3 5
