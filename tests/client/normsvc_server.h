// A CPU-backend normsvc on free loopback ports for the tests that run the
// tools against it, and what its /metrics count.
#pragma once

#include <csignal>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_process.h"

namespace normsvc::testing {

inline const std::string kNormsvcServer = NORMSVC_SERVER_PATH;
inline const std::string kNormctlProgram = NORMCTL_PATH;

class NormsvcServer {
 public:
  // `extra` flags go after the addresses and --backend=cpu.
  NormsvcServer(const TempDir& dir, const std::string& name, std::vector<std::string> extra = {})
      : port_(PickFreePort()), metrics_port_(PickFreePort()) {
    std::vector<std::string> argv = {
        kNormsvcServer, "--grpc_address=127.0.0.1:" + std::to_string(port_),
        "--metrics_address=127.0.0.1:" + std::to_string(metrics_port_), "--backend=cpu"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    process_ = std::make_unique<ChildProcess>(argv, dir.File(name + ".log"));
    ready_ = WaitForPort(port_, std::chrono::seconds(30)) &&
             WaitForPort(metrics_port_, std::chrono::seconds(10));
  }
  ~NormsvcServer() {
    EXPECT_EQ(process_->Stop(SIGTERM, std::chrono::seconds(30)), 0) << process_->Log();
  }
  bool ready() const { return ready_; }
  pid_t pid() const { return process_->pid(); }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string Log() const { return process_->Log(); }

  // normsvc_requests_total summed over the series whose labels include every
  // one of `labels` (e.g. {"method=\"Normalize\"", "code=\"OK\""}).
  double RequestsTotal(const std::vector<std::string>& labels) const {
    const std::string metrics = HttpGet(metrics_port_, "/metrics");
    double total = 0;
    std::istringstream lines(metrics);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind("normsvc_requests_total{", 0) != 0) continue;
      const size_t close = line.find('}');
      const std::string series = line.substr(0, close);
      bool all = true;
      for (const std::string& label : labels) all &= series.find(label) != std::string::npos;
      if (!all) continue;
      total += std::stod(line.substr(close + 1));
    }
    return total;
  }

 private:
  int port_, metrics_port_;
  bool ready_ = false;
  std::unique_ptr<ChildProcess> process_;
};

// A test suite sharing one server: started before the suite's first test
// and stopped (exit status 0 expected) after its last. `Suite` gives each
// suite its own server.
template <typename Suite>
class ServerSuiteTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    server_ = new NormsvcServer(*dir_, "normsvc");
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(server_->ready()) << server_->Log(); }
  // normctl's command line with `args`, aimed at the suite's server.
  static std::vector<std::string> Normctl(std::vector<std::string> args) {
    args.insert(args.begin(), kNormctlProgram);
    args.push_back("--target=" + server_->target());
    args.push_back("--wait_for_ready");
    return args;
  }

  static inline TempDir* dir_ = nullptr;
  static inline NormsvcServer* server_ = nullptr;
  std::mt19937 rng_{std::random_device{}()};
};

}  // namespace normsvc::testing
