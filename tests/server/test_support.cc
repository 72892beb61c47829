#include "test_support.h"

#include <malloc.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iostream>
#include <mutex>
#include <thread>

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>

#include "normsvc/kernels/float16.h"
#include "normsvc/kernels/reference.h"

namespace normsvc::server::testing {
namespace {

int64_t Rows(const google::protobuf::RepeatedField<int64_t>& shape) {
  int64_t rows = 1;
  for (int i = 0; i + 1 < shape.size(); ++i) rows *= shape.Get(i);
  return rows;
}

std::optional<DType> FromProto(v1::DType dtype) {
  switch (dtype) {
    case v1::FP32:
      return DType::kF32;
    case v1::FP16:
      return DType::kF16;
    case v1::BF16:
      return DType::kBF16;
    default:
      return std::nullopt;
  }
}

// Rounds `value` to `dtype` and back.
double RoundTo(double value, DType dtype) {
  uint32_t scratch = 0;
  kernels::StoreFromDouble(&scratch, dtype, 0, value);
  return kernels::LoadAsFloat(&scratch, dtype, 0);
}

::testing::AssertionResult Near(const char* what, int64_t index, double actual, double expected,
                                double tolerance) {
  const double limit = tolerance * (1.0 + std::fabs(expected));
  if (std::isfinite(actual) && std::fabs(actual - expected) <= limit) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << what << "[" << index << "] = " << actual << ", expected " << expected << " (tolerance "
         << limit << ", seed " << TestSeed() << ")";
}

}  // namespace

// Large request and response buffers stay in the heap between requests
// (as normsvc's main sets it up): on machines where page faults are costly,
// an mmap/munmap per multi-megabyte message dominates the tests' time.
[[maybe_unused]] const bool kHeapTuned = [] {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  return true;
}();

uint64_t TestSeed() {
  static const uint64_t seed = [] {
    uint64_t value = std::random_device{}();
    value = (value << 32) ^ std::random_device{}();
    if (const char* fixed = std::getenv("NORMSVC_TEST_SEED"))
      value = std::strtoull(fixed, nullptr, 10);
    std::cerr << "[ server tests ] NORMSVC_TEST_SEED=" << value << "\n";
    return value;
  }();
  return seed;
}

v1::DType ProtoDType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return v1::FP32;
    case DType::kF16:
      return v1::FP16;
    case DType::kBF16:
      return v1::BF16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

HostTensor RandomTensor(std::mt19937_64& rng, DType dtype, std::vector<int64_t> shape,
                        double offset, double scale) {
  HostTensor tensor;
  tensor.dtype = dtype;
  tensor.shape = std::move(shape);
  int64_t count = 1;
  for (int64_t dim : tensor.shape) count *= dim;
  std::normal_distribution<double> normal;
  tensor.bytes.resize(count * kernels::DTypeSize(dtype));
  tensor.values.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    double value = offset + scale * normal(rng);
    if (value == 0.0) value = 0.25;  // never zeros
    kernels::StoreFromDouble(tensor.bytes.data(), dtype, i, value);
    tensor.values[i] = kernels::LoadAsFloat(tensor.bytes.data(), dtype, i);
  }
  return tensor;
}

v1::Tensor ToProto(const HostTensor& tensor) {
  v1::Tensor proto;
  proto.set_dtype(ProtoDType(tensor.dtype));
  for (int64_t dim : tensor.shape) proto.add_shape(dim);
  proto.set_data(tensor.bytes);
  return proto;
}

std::vector<double> Decode(const v1::Tensor& tensor) {
  const DType dtype = FromProto(tensor.dtype()).value_or(DType::kF32);
  const size_t count = tensor.data().size() / kernels::DTypeSize(dtype);
  std::vector<double> values(count);
  for (size_t i = 0; i < count; ++i) {
    values[i] = kernels::LoadAsFloat(tensor.data().data(), dtype, static_cast<int64_t>(i));
  }
  return values;
}

double Tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 1e-4;
    case DType::kF16:
      return 2e-3;
    case DType::kBF16:
      return 1.6e-2;
  }
  return 0;
}

::testing::AssertionResult CheckForward(const v1::NormalizeRequest& request,
                                        const std::vector<double>& gamma,
                                        const std::vector<double>& beta,
                                        const v1::NormalizeResponse& response) {
  const DType x_dtype = *FromProto(request.input().dtype());
  const DType out_dtype = request.output_dtype() == v1::DTYPE_UNSPECIFIED
                              ? x_dtype
                              : *FromProto(request.output_dtype());
  const NormOp op = request.op() == v1::LAYER_NORM ? NormOp::kLayerNorm : NormOp::kRmsNorm;
  const auto& shape = request.input().shape();
  const int64_t hidden = shape.Get(shape.size() - 1);
  const int64_t rows = Rows(shape);
  const double epsilon = request.epsilon() == 0 ? 1e-5f : request.epsilon();
  if (response.request_id() != request.request_id()) {
    return ::testing::AssertionFailure()
           << "request_id " << response.request_id() << ", expected " << request.request_id();
  }
  if (response.output().dtype() != ProtoDType(out_dtype) ||
      response.output().shape().size() != shape.size() ||
      !std::equal(shape.begin(), shape.end(), response.output().shape().begin())) {
    return ::testing::AssertionFailure() << "output dtype or shape wrong: "
                                         << response.output().ShortDebugString().substr(0, 200);
  }
  const std::vector<double> x = Decode(request.input());
  const std::vector<double> residual =
      request.has_residual() ? Decode(request.residual()) : std::vector<double>();
  const std::vector<double> out = Decode(response.output());
  const std::vector<double> sum_out = Decode(response.residual_sum());
  const std::vector<double> mean = Decode(response.mean());
  const std::vector<double> rstd = Decode(response.rstd());
  if (static_cast<int64_t>(out.size()) != rows * hidden) {
    return ::testing::AssertionFailure() << "output has " << out.size() << " elements";
  }
  const bool want_sum = request.return_residual_sum();
  const bool want_mean = request.return_statistics() && op == NormOp::kLayerNorm;
  const bool want_rstd = request.return_statistics();
  if (static_cast<int64_t>(sum_out.size()) != (want_sum ? rows * hidden : 0) ||
      static_cast<int64_t>(mean.size()) != (want_mean ? rows : 0) ||
      static_cast<int64_t>(rstd.size()) != (want_rstd ? rows : 0)) {
    return ::testing::AssertionFailure() << "optional outputs present/absent wrongly";
  }
  std::vector<double> v(hidden);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < hidden; ++i) {
      const int64_t k = r * hidden + i;
      // The contract normalizes x + residual rounded to the input dtype.
      v[i] = residual.empty() ? x[k] : RoundTo(x[k] + residual[k], x_dtype);
      if (want_sum) {
        if (auto result = Near("residual_sum", k, sum_out[k], v[i], Tolerance(x_dtype) / 4);
            !result) {
          return result;
        }
      }
    }
    const kernels::RowResult expected =
        kernels::ReferenceForwardRow(op, v.data(), nullptr, gamma.empty() ? nullptr : gamma.data(),
                                     beta.empty() ? nullptr : beta.data(), hidden, epsilon);
    for (int64_t i = 0; i < hidden; ++i) {
      if (auto result = Near("output", r * hidden + i, out[r * hidden + i], expected.y[i],
                             Tolerance(out_dtype));
          !result) {
        return result;
      }
    }
    if (want_mean) {
      if (auto result = Near("mean", r, mean[r], expected.mean, 1e-5); !result) return result;
    }
    if (want_rstd) {
      if (auto result = Near("rstd", r, rstd[r], expected.rstd, 1e-4); !result) return result;
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult CheckBackward(const v1::NormalizeBackwardRequest& request,
                                         const std::vector<double>& gamma,
                                         const v1::NormalizeBackwardResponse& response) {
  const DType dtype = *FromProto(request.input().dtype());
  const bool layer_norm = request.op() == v1::LAYER_NORM;
  const auto& shape = request.input().shape();
  const int64_t hidden = shape.Get(shape.size() - 1);
  const int64_t rows = Rows(shape);
  const double epsilon = request.epsilon() == 0 ? 1e-5f : request.epsilon();
  const std::vector<double> x = Decode(request.input());
  const std::vector<double> dy = Decode(request.grad_output());
  const std::vector<double> saved_mean = Decode(request.mean());
  const std::vector<double> saved_rstd = Decode(request.rstd());
  const std::vector<double> dx = Decode(response.grad_input());
  const std::vector<double> dgamma = Decode(response.grad_gamma());
  const std::vector<double> dbeta = Decode(response.grad_beta());
  if (static_cast<int64_t>(dx.size()) != rows * hidden ||
      static_cast<int64_t>(dgamma.size()) != hidden ||
      static_cast<int64_t>(dbeta.size()) != (layer_norm ? hidden : 0)) {
    return ::testing::AssertionFailure() << "backward outputs have the wrong sizes";
  }
  std::vector<double> dgamma_ref(hidden, 0.0), dbeta_ref(hidden, 0.0), xhat(hidden), g(hidden);
  double dgamma_scale = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = &x[r * hidden];
    const double* dyr = &dy[r * hidden];
    double mean = 0, rstd = 0;
    if (!saved_rstd.empty()) {
      rstd = saved_rstd[r];
      mean = layer_norm ? saved_mean[r] : 0.0;
    } else {
      if (layer_norm) {
        for (int64_t i = 0; i < hidden; ++i) mean += xr[i];
        mean /= hidden;
      }
      double second = 0;
      for (int64_t i = 0; i < hidden; ++i) second += (xr[i] - mean) * (xr[i] - mean);
      rstd = 1.0 / std::sqrt(second / hidden + epsilon);
    }
    double mean_g = 0, mean_gx = 0;
    for (int64_t i = 0; i < hidden; ++i) {
      xhat[i] = (xr[i] - mean) * rstd;
      g[i] = dyr[i] * (gamma.empty() ? 1.0 : gamma[i]);
      mean_g += g[i];
      mean_gx += g[i] * xhat[i];
      dgamma_ref[i] += dyr[i] * xhat[i];
      dbeta_ref[i] += dyr[i];
      dgamma_scale += std::fabs(dyr[i] * xhat[i]);
    }
    mean_g /= hidden;
    mean_gx /= hidden;
    for (int64_t i = 0; i < hidden; ++i) {
      const double expected = rstd * ((layer_norm ? g[i] - mean_g : g[i]) - xhat[i] * mean_gx);
      if (auto result = Near("grad_input", r * hidden + i, dx[r * hidden + i], expected,
                             Tolerance(dtype) * 4);
          !result) {
        return result;
      }
    }
  }
  // Sums over rows: the tolerance scales with the magnitude summed.
  const double sum_tolerance = 1e-5 * (1.0 + dgamma_scale / hidden);
  for (int64_t i = 0; i < hidden; ++i) {
    if (auto result = Near("grad_gamma", i, dgamma[i], dgamma_ref[i], sum_tolerance); !result) {
      return result;
    }
    if (layer_norm) {
      if (auto result = Near("grad_beta", i, dbeta[i], dbeta_ref[i], sum_tolerance); !result) {
        return result;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

namespace {

const prometheus::ClientMetric* FindSeries(const std::vector<prometheus::MetricFamily>& families,
                                           const std::string& family,
                                           const std::map<std::string, std::string>& labels,
                                           prometheus::MetricType* type) {
  for (const prometheus::MetricFamily& f : families) {
    if (f.name != family) continue;
    *type = f.type;
    for (const prometheus::ClientMetric& metric : f.metric) {
      std::map<std::string, std::string> have;
      for (const auto& label : metric.label) have[label.name] = label.value;
      if (have == labels) return &metric;
    }
  }
  return nullptr;
}

}  // namespace

int64_t StatusResidentBytes() {
  std::ifstream file("/proc/self/status");
  for (std::string line; std::getline(file, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return 1024 * std::stoll(line.substr(6));
  }
  return -1;
}

std::optional<double> SeriesValue(const prometheus::Registry& registry, const std::string& family,
                                  const std::map<std::string, std::string>& labels) {
  const std::vector<prometheus::MetricFamily> families = registry.Collect();
  prometheus::MetricType type{};
  const prometheus::ClientMetric* metric = FindSeries(families, family, labels, &type);
  if (metric == nullptr) return std::nullopt;
  switch (type) {
    case prometheus::MetricType::Counter:
      return metric->counter.value;
    case prometheus::MetricType::Gauge:
      return metric->gauge.value;
    case prometheus::MetricType::Histogram:
      return static_cast<double>(metric->histogram.sample_count);
    default:
      return std::nullopt;
  }
}

std::optional<double> HistogramSum(const prometheus::Registry& registry, const std::string& family,
                                   const std::map<std::string, std::string>& labels) {
  const std::vector<prometheus::MetricFamily> families = registry.Collect();
  prometheus::MetricType type{};
  const prometheus::ClientMetric* metric = FindSeries(families, family, labels, &type);
  if (metric == nullptr || type != prometheus::MetricType::Histogram) return std::nullopt;
  return metric->histogram.sample_sum;
}

ServerOptions TestServerOptions() {
  ServerOptions options;
  options.grpc_address = "127.0.0.1:0";
  options.metrics_address = "";
  options.backend = Backend::kCpu;
  options.drain_timeout_s = 20;
  options.drain_grace_ms = 0;  // tests that need the grace ask for it
  options.log_level = "warning";
  return options;
}

::testing::AssertionResult QueuedBytesReturnToZero(const Server& server, double seconds) {
  const auto give_up = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(seconds));
  int64_t held = server.queued_bytes();
  while (held != 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    held = server.queued_bytes();
  }
  if (held == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << held << " bytes of --max_queued_bytes still held "
                                       << seconds << " s after the last request";
}

std::unique_ptr<Server> StartServer(const ServerOptions& options) {
  auto server = std::make_unique<Server>(options);
  const absl::Status status = server->Start();
  EXPECT_TRUE(status.ok()) << status;
  if (!status.ok()) return nullptr;
  return server;
}

std::shared_ptr<grpc::Channel> ConnectedChannel(int port, const grpc::ChannelArguments& arguments) {
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), arguments);
  // Seen once in CI on two loaded cores: one of eight clients' first attempt
  // failed ("failed to connect to all addresses ... 127.0.0.1:<port>") and
  // its 25 calls with it.
  channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return channel;
}

std::unique_ptr<v1::Normalizer::Stub> Connect(int port) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(-1);
  arguments.SetMaxSendMessageSize(-1);
  // Each stub gets its own connection, like separate clients would.
  arguments.SetInt("grpc.use_local_subchannel_pool", 1);
  return v1::Normalizer::NewStub(ConnectedChannel(port, arguments));
}

std::unique_ptr<grpc::ClientContext> ContextWithDeadline(double seconds) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6)));
  return context;
}

std::function<void(grpc::Status)> AwaitedStatus::Callback() {
  started_.store(true, std::memory_order_release);
  return [this](grpc::Status status) {
    started_.load(std::memory_order_acquire);
    done_.set_value(std::move(status));
  };
}

grpc::Status AwaitedStatus::Wait() { return done_.get_future().get(); }

grpc::Status RawUnaryCall(int port, const std::string& method, const std::string& request,
                          std::string* reply) {
  grpc::GenericStub stub(ConnectedChannel(port));
  grpc::Slice slice(request.data(), request.size());
  grpc::ByteBuffer request_buffer(&slice, 1), reply_buffer;
  auto context = ContextWithDeadline();
  AwaitedStatus done;
  stub.UnaryCall(context.get(), method, grpc::StubOptions(), &request_buffer, &reply_buffer,
                 done.Callback());
  const grpc::Status status = done.Wait();
  reply->clear();
  std::vector<grpc::Slice> slices;
  if (reply_buffer.Valid() && reply_buffer.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      reply->append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return status;
}

ForwardRequest MakeForwardRequest(std::mt19937_64& rng, const ForwardCase& c, uint64_t id) {
  ForwardRequest made;
  v1::NormalizeRequest& r = made.request;
  r.set_request_id(id);
  r.set_op(c.op == NormOp::kLayerNorm ? v1::LAYER_NORM : v1::RMS_NORM);
  *r.mutable_input() = ToProto(RandomTensor(rng, c.dtype, c.shape));
  r.set_epsilon(c.epsilon);
  if (c.output_dtype) r.set_output_dtype(ProtoDType(*c.output_dtype));
  if (c.residual) *r.mutable_residual() = ToProto(RandomTensor(rng, c.dtype, c.shape, -0.25, 1.0));
  r.set_return_residual_sum(c.return_residual_sum);
  r.set_return_statistics(c.return_statistics);
  const int64_t hidden = c.shape.back();
  const DType param_dtype = c.param_dtype.value_or(c.dtype);
  if (c.inline_gamma) {
    HostTensor gamma = RandomTensor(rng, param_dtype, {hidden}, 1.0, 0.25);
    made.gamma = gamma.values;
    *r.mutable_parameters()->mutable_inline_()->mutable_gamma() = ToProto(gamma);
  }
  if (c.inline_beta) {
    HostTensor beta = RandomTensor(rng, param_dtype, {hidden}, 0.0, 0.5);
    made.beta = beta.values;
    *r.mutable_parameters()->mutable_inline_()->mutable_beta() = ToProto(beta);
  }
  return made;
}

}  // namespace normsvc::server::testing
