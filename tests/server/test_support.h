// Shared by the server tests: random tensors in every dtype, the
// independent double-precision oracles the results are checked against,
// and an in-process server on a free loopback port.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "normsvc/kernels/types.h"
#include "normsvc/v1/normalizer.grpc.pb.h"
#include "server/options.h"
#include "server/server.h"

namespace normsvc::server::testing {

namespace v1 = ::normsvc::v1;
using kernels::DType;
using kernels::NormOp;

// A fresh seed per process, printed so a failure can be reproduced with
// NORMSVC_TEST_SEED=<seed>.
uint64_t TestSeed();

// Values representable in `dtype` (drawn as offset + scale * N(0, 1)) and
// their little-endian bytes.
struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<double> values;  // exact decoded values
  std::string bytes;
};
HostTensor RandomTensor(std::mt19937_64& rng, DType dtype, std::vector<int64_t> shape,
                        double offset = 0.5, double scale = 2.0);
v1::Tensor ToProto(const HostTensor& tensor);
std::vector<double> Decode(const v1::Tensor& tensor);
v1::DType ProtoDType(DType dtype);

// Tolerance of a result stored in `dtype`: rounding of the output plus fp32
// accumulation on the GPU, relative to 1 + |expected|.
double Tolerance(DType dtype);

// Forward oracle: inputs as the request carries them; gamma/beta decoded
// (empty: absent). Checks output, residual_sum, mean and rstd.
::testing::AssertionResult CheckForward(const v1::NormalizeRequest& request,
                                        const std::vector<double>& gamma,
                                        const std::vector<double>& beta,
                                        const v1::NormalizeResponse& response);
// Backward oracle (dx, dgamma, dbeta), in double.
::testing::AssertionResult CheckBackward(const v1::NormalizeBackwardRequest& request,
                                         const std::vector<double>& gamma,
                                         const v1::NormalizeBackwardResponse& response);

// Options for a test server: loopback, port 0, CPU backend, no metrics.
ServerOptions TestServerOptions();
// Starts a server (asserting success) on a free port.
std::unique_ptr<Server> StartServer(const ServerOptions& options);
// Success once the server's --max_queued_bytes budget is all given back
// (every accepted request answered and its reply sent), within `seconds`:
// a test's last check that no path kept budget bytes.
::testing::AssertionResult QueuedBytesReturnToZero(const Server& server, double seconds = 10);
// A channel to 127.0.0.1:`port`, connected before it is returned (at most
// 10 s): the tests' calls fail fast, so a first connection attempt that
// failed would fail every call until gRPC's reconnect backoff retries it.
// A channel that never connects is returned as it is; its calls fail.
std::shared_ptr<grpc::Channel> ConnectedChannel(
    int port, const grpc::ChannelArguments& arguments = grpc::ChannelArguments());

std::unique_ptr<v1::Normalizer::Stub> Connect(int port);
// A context with a deadline `seconds` from now.
std::unique_ptr<grpc::ClientContext> ContextWithDeadline(double seconds = 30);

// A callback-API call's final status, awaited on the thread that starts
// the call: pass Callback() to the call, then Wait(). Callback() releases
// this object to gRPC's thread, and the callback acquires it there: gRPC's
// core orders the two where ThreadSanitizer cannot see it (the promise's
// shared state is made on one thread and set on the other).
class AwaitedStatus {
 public:
  std::function<void(grpc::Status)> Callback();
  grpc::Status Wait();

 private:
  std::atomic<bool> started_{false};
  std::promise<grpc::Status> done_;
};

// A unary call of `method` (e.g. "/normsvc.v1.Normalizer/Normalize") with
// `request` as the message's bytes, through a generic stub on 127.0.0.1:
// `port`: its status, and the reply's bytes in `reply`.
grpc::Status RawUnaryCall(int port, const std::string& method, const std::string& request,
                          std::string* reply);

// The value of one series of `family` in `registry`: a counter's or gauge's
// value, a histogram's sample count; nullopt when absent. `labels` must
// match the series' labels exactly.
std::optional<double> SeriesValue(const prometheus::Registry& registry, const std::string& family,
                                  const std::map<std::string, std::string>& labels);
// A histogram's sample sum.
std::optional<double> HistogramSum(const prometheus::Registry& registry, const std::string& family,
                                   const std::map<std::string, std::string>& labels);

// This process's resident memory, VmRSS from /proc/self/status, in bytes
// (-1 when unreadable): read independently of the server's own /proc/self/stat.
int64_t StatusResidentBytes();

// A forward request with random data.
struct ForwardCase {
  NormOp op = NormOp::kLayerNorm;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape = {4, 64};
  std::optional<DType> output_dtype;
  bool residual = false;
  bool return_residual_sum = false;
  bool return_statistics = false;
  bool inline_gamma = false;
  bool inline_beta = false;
  std::optional<DType> param_dtype;  // default: the input dtype
  float epsilon = 0;                 // 0: the server's default
};
struct ForwardRequest {
  v1::NormalizeRequest request;
  std::vector<double> gamma, beta;  // decoded inline parameters
};
ForwardRequest MakeForwardRequest(std::mt19937_64& rng, const ForwardCase& c, uint64_t id);

}  // namespace normsvc::server::testing
