#include "server/usable_cpus.h"

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace normsvc::server {
namespace {

// Whole CPUs a quota keeps busy, rounded down (a 7.5-CPU quota cannot keep
// 8 threads running), at least 1; huge quotas saturate instead of wrapping.
std::optional<int> CpusFromQuota(int64_t quota, int64_t period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  return static_cast<int>(std::clamp<int64_t>(quota / period, 1, INT32_MAX));
}

std::string ReadSmallFile(const char* path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

int AffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

std::optional<int> CpusFromCgroupV2(absl::string_view cpu_max) {
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::StripAsciiWhitespace(cpu_max), ' ', absl::SkipEmpty());
  if (fields.size() != 2 || fields[0] == "max") return std::nullopt;
  int64_t quota = 0, period = 0;
  if (!absl::SimpleAtoi(fields[0], &quota) || !absl::SimpleAtoi(fields[1], &period)) {
    return std::nullopt;
  }
  return CpusFromQuota(quota, period);
}

std::optional<int> CpusFromCgroupV1(absl::string_view quota_us, absl::string_view period_us) {
  int64_t quota = 0, period = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(quota_us), &quota) ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(period_us), &period)) {
    return std::nullopt;
  }
  return CpusFromQuota(quota, period);
}

namespace {

// The process's cgroup paths, from /proc/self/cgroup: in the v2 hierarchy
// ("0::/path") and in the v1 hierarchy that holds the cpu controller
// ("4:cpu,cpuacct:/path"); "/" (the mount point) in a container with its
// own cgroup namespace, or where the line or the file is missing.
struct CgroupPaths {
  std::string v2 = "/";
  std::string v1_cpu = "/";
};

CgroupPaths ReadCgroupPaths() {
  CgroupPaths paths;
  for (absl::string_view line : absl::StrSplit(ReadSmallFile("/proc/self/cgroup"), '\n')) {
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    if (parts[0] == "0" && parts[1].empty()) paths.v2 = std::string(parts[2]);
    for (absl::string_view controller : absl::StrSplit(parts[1], ',')) {
      if (controller == "cpu") paths.v1_cpu = std::string(parts[2]);
    }
  }
  return paths;
}

}  // namespace

std::vector<std::string> CgroupPathAndParents(std::string path) {
  std::vector<std::string> paths;
  while (true) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    paths.push_back(path.empty() ? "/" : path);
    if (path.empty() || path == "/") break;
    const std::size_t slash = path.rfind('/');
    path = slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
  }
  return paths;
}

int UsableCpus() {
  int cpus = AffinityCpus();
  // The smallest limit of the process's cgroup and of those above it (a
  // parent's quota binds its children: a systemd slice, a pod's cgroup
  // around its containers). In a container with its own cgroup namespace
  // the process's cgroup is the root of what it sees: the mount point.
  std::optional<int> limit;
  auto tighten = [&limit](std::optional<int> found) {
    if (found && (!limit || *found < *limit)) limit = found;
  };
  const CgroupPaths cgroup = ReadCgroupPaths();
  for (const std::string& path : CgroupPathAndParents(cgroup.v2)) {
    const std::string dir = "/sys/fs/cgroup" + (path == "/" ? std::string() : path);
    tighten(CpusFromCgroupV2(ReadSmallFile((dir + "/cpu.max").c_str())));
  }
  for (const std::string& path : CgroupPathAndParents(cgroup.v1_cpu)) {
    const std::string dir = "/sys/fs/cgroup/cpu" + (path == "/" ? std::string() : path);
    tighten(CpusFromCgroupV1(ReadSmallFile((dir + "/cpu.cfs_quota_us").c_str()),
                             ReadSmallFile((dir + "/cpu.cfs_period_us").c_str())));
  }
  if (limit) cpus = std::min(cpus, *limit);
  return std::max(1, cpus);
}

}  // namespace normsvc::server
