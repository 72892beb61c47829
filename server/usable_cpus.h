// How many CPUs this process may keep busy: the CPUs of its affinity mask,
// capped by the CPU quota of its cgroup (a Kubernetes CPU limit), which
// std::thread::hardware_concurrency() ignores (a pod limited to 2 CPUs on a
// 64-core node sees 64). Used to size thread pools and to decide whether an
// idle worker may poll (--idle_spin_us=-1).
#pragma once

#include <optional>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

namespace normsvc::server {

// At least 1. Read from the system at each call (a few small files): its
// callers size things once, at start-up.
int UsableCpus();

// Whole CPUs granted by a cgroup v2 `cpu.max` line ("max 100000": none;
// "750000 100000": 7.5, rounded down to 7, and never below 1), or by cgroup
// v1's quota and period in microseconds (quota -1: none). nullopt: no
// limit, or text that is not such a line.
std::optional<int> CpusFromCgroupV2(absl::string_view cpu_max);
std::optional<int> CpusFromCgroupV1(absl::string_view quota_us, absl::string_view period_us);

// A cgroup path and every cgroup above it, to the root: "/a/b" gives
// "/a/b", "/a", "/". UsableCpus takes the smallest limit among them.
std::vector<std::string> CgroupPathAndParents(std::string path);

}  // namespace normsvc::server
