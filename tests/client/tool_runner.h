// Shared pieces of the tests that run normctl and normload as processes.
#pragma once

#include <csignal>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "normsvc/client/npy.h"
#include "test_process.h"

namespace normsvc::testing {

// Paths of the binaries under test (set by CMake).
inline const std::string kNormctl = NORMCTL_PATH;
inline const std::string kNormload = NORMLOAD_PATH;
inline const std::string kEchoServer = ECHO_SERVER_PATH;

// The echo server on a free loopback port, stopped with SIGINT at the end.
class EchoServer {
 public:
  explicit EchoServer(const TempDir& dir) : port_(PickFreePort()) {
    process_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{kEchoServer, "--address=127.0.0.1:" + std::to_string(port_)},
        dir.File("echo.log"));
    ready_ = WaitForPort(port_, std::chrono::seconds(20));
  }
  bool ready() const { return ready_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  void Kill() { process_->Stop(SIGKILL, std::chrono::seconds(5)); }
  // Stops the server and returns the counts it printed: {normalize, stream}.
  std::pair<int64_t, int64_t> StopAndCount() {
    EXPECT_EQ(process_->Stop(SIGINT, std::chrono::seconds(10)), 0);
    const std::string log = process_->Log();
    long long normalize = -1, stream = -1;
    const size_t at = log.find("served normalize=");
    if (at != std::string::npos) {
      std::sscanf(log.c_str() + at, "served normalize=%lld stream_messages=%lld", &normalize,
                  &stream);
    }
    return {normalize, stream};
  }

 private:
  int port_;
  bool ready_ = false;
  std::unique_ptr<ChildProcess> process_;
};

inline google::protobuf::Struct ParseJson(const std::string& text) {
  google::protobuf::Struct parsed;
  auto status = google::protobuf::util::JsonStringToMessage(text, &parsed);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << text;
  return parsed;
}

inline const google::protobuf::Value& Field(const google::protobuf::Struct& object,
                                            const std::string& path_head) {
  static const google::protobuf::Value kMissing;
  auto it = object.fields().find(path_head);
  return it == object.fields().end() ? kMissing : it->second;
}

// object["a"]["b"]... as a number (NaN when missing).
inline double Number(const google::protobuf::Struct& object, std::vector<std::string> path) {
  const google::protobuf::Struct* current = &object;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    const google::protobuf::Value& value = Field(*current, path[i]);
    if (!value.has_struct_value()) return std::nan("");
    current = &value.struct_value();
  }
  const google::protobuf::Value& leaf = Field(*current, path.back());
  return leaf.kind_case() == google::protobuf::Value::kNumberValue ? leaf.number_value()
                                                                   : std::nan("");
}

// A C-order fp32 array of random values (never zeros) saved as .npy.
inline std::vector<float> WriteRandomNpy(const std::string& path, std::vector<int64_t> shape,
                                         std::mt19937& rng, double mean = 0.3,
                                         double stddev = 1.7) {
  std::normal_distribution<float> normal(static_cast<float>(mean), static_cast<float>(stddev));
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  std::vector<float> values(count);
  for (float& value : values) value = normal(rng);
  client::NpyArray array;
  array.dtype = client::NpyDType::kFloat32;
  array.shape = shape;
  array.data.assign(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  EXPECT_TRUE(client::WriteNpyFile(path, array).ok());
  return values;
}

}  // namespace normsvc::testing
