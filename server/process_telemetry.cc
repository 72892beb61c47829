#include "server/process_telemetry.h"

#include <dirent.h>
#include <malloc.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "server/sanitizer_allocator.h"
#ifdef NORMSVC_SANITIZER_ALLOCATOR
#include <sanitizer/allocator_interface.h>
#endif

namespace normsvc::server {
namespace {

// The fields of /proc/self/stat the series need (proc(5) numbering).
struct ProcStat {
  double cpu_seconds = 0;      // utime (14) + stime (15)
  int64_t threads = 0;         // num_threads (20)
  double start_ticks = 0;      // starttime (22), clock ticks after boot
  int64_t virtual_bytes = 0;   // vsize (23)
  int64_t resident_pages = 0;  // rss (24)
};

std::optional<ProcStat> ReadProcStat() {
  std::ifstream file("/proc/self/stat");
  std::string line;
  if (!std::getline(file, line)) return std::nullopt;
  // The command name (field 2) is in parentheses and may hold spaces and
  // parentheses itself: the fields that follow start after the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 1));
  std::vector<std::string> values;  // values[0] is field 3
  for (std::string value; fields >> value;) values.push_back(value);
  if (values.size() < 22) return std::nullopt;
  const auto field = [&](int number) { return std::stod(values[number - 3]); };
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  ProcStat stat;
  stat.cpu_seconds = (field(14) + field(15)) / ticks;
  stat.threads = static_cast<int64_t>(field(20));
  stat.start_ticks = field(22);
  stat.virtual_bytes = static_cast<int64_t>(field(23));
  stat.resident_pages = static_cast<int64_t>(field(24));
  return stat;
}

// Seconds since the epoch at which the machine booted (btime, /proc/stat).
std::optional<double> BootTimeSeconds() {
  std::ifstream file("/proc/stat");
  for (std::string line; std::getline(file, line);) {
    if (line.rfind("btime ", 0) == 0) return std::stod(line.substr(6));
  }
  return std::nullopt;
}

std::optional<int64_t> OpenFileDescriptors() {
  DIR* directory = opendir("/proc/self/fd");
  if (directory == nullptr) return std::nullopt;
  int64_t count = 0;
  while (const dirent* entry = readdir(directory)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(directory);
  return count - 1;  // the descriptor opendir itself holds
}

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type,
                                double value) {
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return prometheus::MetricFamily{name, help, type, {metric}};
}

}  // namespace

std::optional<HeapUsage> ReadHeapUsage() {
#if defined(NORMSVC_SANITIZER_ALLOCATOR)
  HeapUsage usage;
  usage.allocated_bytes = static_cast<int64_t>(__sanitizer_get_current_allocated_bytes());
  usage.free_bytes = static_cast<int64_t>(__sanitizer_get_free_bytes());
  return usage;
#elif defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  // Walks every arena under its lock: cheap next to a scrape.
  const struct mallinfo2 info = mallinfo2();
  HeapUsage usage;
  usage.allocated_bytes = static_cast<int64_t>(info.uordblks + info.hblkhd);
  usage.free_bytes = static_cast<int64_t>(info.fordblks);
  return usage;
#else
  return std::nullopt;
#endif
}

std::optional<int64_t> ReadResidentBytes() {
  const std::optional<ProcStat> stat = ReadProcStat();
  if (!stat) return std::nullopt;
  return stat->resident_pages * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

ProcessTelemetry::ProcessTelemetry() : start_time_seconds_(-1) {
  const std::optional<ProcStat> stat = ReadProcStat();
  const std::optional<double> boot = BootTimeSeconds();
  if (stat && boot) {
    start_time_seconds_ = *boot + stat->start_ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
}

std::vector<prometheus::MetricFamily> ProcessTelemetry::Collect() const {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> families;
  if (const std::optional<ProcStat> stat = ReadProcStat()) {
    const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
    families.push_back(Family("process_cpu_seconds_total", "User and system CPU time, seconds",
                              MetricType::Counter, stat->cpu_seconds));
    families.push_back(Family("process_resident_memory_bytes", "Resident memory size, bytes",
                              MetricType::Gauge, page * stat->resident_pages));
    families.push_back(Family("process_virtual_memory_bytes", "Virtual memory size, bytes",
                              MetricType::Gauge, static_cast<double>(stat->virtual_bytes)));
    families.push_back(Family("process_threads", "Threads of the process", MetricType::Gauge,
                              static_cast<double>(stat->threads)));
  }
  if (const std::optional<int64_t> fds = OpenFileDescriptors()) {
    families.push_back(Family("process_open_fds", "Open file descriptors", MetricType::Gauge,
                              static_cast<double>(*fds)));
  }
  if (start_time_seconds_ >= 0) {
    families.push_back(Family("process_start_time_seconds",
                              "Start time of the process since the Unix epoch, seconds",
                              MetricType::Gauge, start_time_seconds_));
  }
  if (const std::optional<HeapUsage> heap = ReadHeapUsage()) {
    families.push_back(Family("normsvc_heap_allocated_bytes",
                              "Bytes in live heap allocations, as the allocator counts them",
                              MetricType::Gauge, static_cast<double>(heap->allocated_bytes)));
    families.push_back(Family("normsvc_heap_free_bytes",
                              "Freed heap bytes the allocator keeps for reuse", MetricType::Gauge,
                              static_cast<double>(heap->free_bytes)));
  }
  return families;
}

}  // namespace normsvc::server
