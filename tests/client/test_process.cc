#include "test_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace normsvc::testing {
namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& out_path,
            const std::string& err_path) {
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err =
        err_path == out_path ? out : open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    const int null_in = open("/dev/null", O_RDONLY);
    dup2(null_in, 0);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Waits for `pid` up to `timeout`; true when it exited (status stored).
bool WaitFor(pid_t pid, std::chrono::milliseconds timeout, int* status) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const pid_t done = waitpid(pid, status, WNOHANG);
    if (done == pid) return true;
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

std::string ProgramPath(const char* variable, const char* built_path) {
  const char* path = std::getenv(variable);
  return path != nullptr && *path != '\0' ? std::string(path) : std::string(built_path);
}

int PickFreePort() {
  // The kernel may hand the same free port to two binds in a row; a test
  // that asks for two ports (gRPC and metrics) must not get it twice, so no
  // port is returned twice in a process.
  static std::mutex mutex;
  static std::set<int> handed_out;
  std::lock_guard<std::mutex> lock(mutex);
  while (true) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = Loopback(0);
    bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    socklen_t length = sizeof(address);
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
    close(fd);
    const int port = ntohs(address.sin_port);
    if (handed_out.insert(port).second) return port;
  }
}

bool WaitForPort(int port, std::chrono::milliseconds timeout) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < give_up) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = Loopback(port);
    const bool connected = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    close(fd);
    if (connected) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TempDir::TempDir() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "normsvc-client-test-XXXXXX").string();
  path_ = mkdtemp(pattern.data());
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& log_path)
    : log_path_(log_path) {
  pid_ = Spawn(argv, log_path, log_path);
}

ChildProcess::~ChildProcess() {
  if (running()) Stop(SIGKILL, std::chrono::seconds(5));
}

bool ChildProcess::running() {
  if (pid_ <= 0 || status_ != -1) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    status_ = DecodeStatus(status);
    return false;
  }
  return true;
}

int ChildProcess::Stop(int signal, std::chrono::milliseconds timeout) {
  if (!running()) return status_;
  kill(pid_, signal);
  int status = 0;
  if (!WaitFor(pid_, timeout, &status)) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
  }
  status_ = DecodeStatus(status);
  return status_;
}

int ChildProcess::Wait(std::chrono::milliseconds timeout) {
  if (!running()) return status_;
  int status = 0;
  if (!WaitFor(pid_, timeout, &status)) return -1;
  status_ = DecodeStatus(status);
  return status_;
}

std::string ChildProcess::Log() const { return ReadFile(log_path_); }

CommandResult RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  TempDir dir;
  const std::string out_path = dir.File("out"), err_path = dir.File("err");
  const pid_t pid = Spawn(argv, out_path, err_path);
  CommandResult result;
  int status = 0;
  if (WaitFor(pid, timeout, &status)) {
    result.exit_code = DecodeStatus(status);
  } else {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  return result;
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address = Loopback(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  (void)!write(fd, request.data(), request.size());
  std::string response;
  char buffer[65536];
  ssize_t n = 0;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0)
    response.append(buffer, static_cast<size_t>(n));
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

}  // namespace normsvc::testing
