#include "server_under_test.h"

#include <csignal>
#include <fstream>
#include <sstream>
#include <thread>

namespace normsvc::soak {

ServerUnderTest::ServerUnderTest(const std::string& binary, const std::vector<std::string>& flags,
                                 const std::vector<std::string>& environment,
                                 const std::string& log_path)
    : grpc_port_(testing::PickFreePort()), metrics_port_(testing::PickFreePort()) {
  // env(1) replaces itself with the server: the child's pid is the server's.
  std::vector<std::string> argv = {"/usr/bin/env"};
  argv.insert(argv.end(), environment.begin(), environment.end());
  argv.push_back(binary);
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back("--grpc_address=127.0.0.1:" + std::to_string(grpc_port_));
  argv.push_back("--metrics_address=127.0.0.1:" + std::to_string(metrics_port_));
  process_ = std::make_unique<testing::ChildProcess>(argv, log_path);
  ready_ = testing::WaitForPort(grpc_port_, std::chrono::seconds(30)) &&
           testing::WaitForPort(metrics_port_, std::chrono::seconds(30));
}

int64_t ServerUnderTest::ResidentBytes(const std::string& field) const {
  std::ifstream status("/proc/" + std::to_string(process_->pid()) + "/status");
  std::string line;
  const std::string key = field + ":";
  while (std::getline(status, line)) {
    if (line.rfind(key, 0) == 0) {
      std::istringstream fields(line.substr(key.size()));
      int64_t kib = 0;
      fields >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

bool ServerUnderTest::SaveSmaps(const std::string& path) const {
  std::ifstream smaps("/proc/" + std::to_string(process_->pid()) + "/smaps");
  std::ofstream copy(path);
  if (!smaps || !copy) return false;
  copy << smaps.rdbuf();
  return static_cast<bool>(copy);
}

std::string ServerUnderTest::Metrics() const { return testing::HttpGet(metrics_port_, "/metrics"); }

bool ServerUnderTest::ReleaseFreeHeap() const {
  const std::string releases = "normsvc_heap_releases_total";
  const double before = SumSeries(Metrics(), releases);
  if (before < 0 || kill(process_->pid(), SIGUSR1) != 0) return false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < give_up) {
    if (SumSeries(Metrics(), releases) > before) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

int ServerUnderTest::Stop(std::chrono::milliseconds timeout) {
  return process_->Stop(SIGTERM, timeout);
}

double SumSeries(const std::string& exposition, const std::string& family,
                 const std::vector<std::string>& labels) {
  std::istringstream lines(exposition);
  std::string line;
  double sum = 0;
  bool found = false;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#' || line.rfind(family, 0) != 0) continue;
    const char next = line.size() > family.size() ? line[family.size()] : '\0';
    if (next != '{' && next != ' ') continue;  // another family with this prefix
    bool match = true;
    for (const std::string& label : labels) match = match && line.find(label) != std::string::npos;
    if (!match) continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    sum += std::stod(line.substr(space + 1));
    found = true;
  }
  return found ? sum : -1;
}

std::string LogExcerpt(const std::string& log, int max_lines) {
  std::vector<std::string> lines;
  std::istringstream stream(log);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  const auto starts_report = [](const std::string& line) {
    return line.rfind("==", 0) == 0 && (line.find("==WARNING: ") != std::string::npos ||
                                        line.find("==ERROR: ") != std::string::npos);
  };
  std::vector<std::string> excerpt;
  bool in_report = false;
  for (const std::string& line : lines) {
    if (starts_report(line)) in_report = true;
    if (in_report) excerpt.push_back(line);
    if (line.rfind("SUMMARY: ", 0) == 0) in_report = false;
  }
  if (excerpt.empty()) {  // no sanitizer report: the log's end
    const size_t first =
        lines.size() > static_cast<size_t>(max_lines) ? lines.size() - max_lines : 0;
    excerpt.assign(lines.begin() + first, lines.end());
  }
  // Appended piece by piece: GCC 12 reports a false -Wrestrict on
  // `"literal" + std::string&&` (its inlined insert), which -Werror turns
  // into a build failure.
  std::ostringstream text;
  for (size_t i = 0; i < excerpt.size() && i < static_cast<size_t>(max_lines); ++i) {
    text << excerpt[i] << '\n';
  }
  if (excerpt.size() > static_cast<size_t>(max_lines)) {
    text << '[' << (excerpt.size() - max_lines) << " more lines in the log]\n";
  }
  return text.str();
}

}  // namespace normsvc::soak
