// Helpers for tests that run the tools and servers as processes on
// loopback: free ports, child processes with bounded waits, command runs
// with captured output, and a plain HTTP GET for /metrics.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace normsvc::testing {

// The program a test runs: the path in environment variable `variable` when
// set (binaries moved away from their build tree, e.g. to a GPU machine),
// else `built_path`.
std::string ProgramPath(const char* variable, const char* built_path);

// A TCP port on 127.0.0.1 that was free a moment ago, never the same one
// twice in a process.
int PickFreePort();
// True once 127.0.0.1:port accepts a connection (polls until `timeout`).
bool WaitForPort(int port, std::chrono::milliseconds timeout);

// A temporary directory removed (with its files) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A child process with stdout and stderr in `log_path`.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_path);
  ~ChildProcess();  // SIGKILL if still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool running();
  pid_t pid() const { return pid_; }
  // Sends `signal`, waits up to `timeout`, then SIGKILL. Returns the exit
  // status (or 128 + signal number when killed by a signal).
  int Stop(int signal, std::chrono::milliseconds timeout);
  // Waits up to `timeout` for the process to exit by itself; its exit
  // status, or -1 when it is still running.
  int Wait(std::chrono::milliseconds timeout);
  std::string Log() const;

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  std::string log_path_;
};

struct CommandResult {
  int exit_code = -1;  // 128 + signal when killed; -1 when it timed out
  std::string out;
  std::string err;
};
// Runs argv to completion (killed after `timeout`).
CommandResult RunCommand(const std::vector<std::string>& argv,
                         std::chrono::milliseconds timeout = std::chrono::seconds(60));

// The body of GET http://127.0.0.1:port/path ("" on failure).
std::string HttpGet(int port, const std::string& path);

std::string ReadFile(const std::string& path);

}  // namespace normsvc::testing
