// normsvc_echo: the baseline the service's benchmark compares against. A
// minimal gRPC callback server implementing normsvc.v1.Normalizer's
// Normalize and NormalizeStream by returning the request's input tensor as
// the output, so the load generator drives it with exactly the payloads it
// sends to normsvc: what it measures is the cost of gRPC itself.
//
// GetServerInfo answers backend "echo" (normload detects echo mode from it).
// grpc.health.v1 answers SERVING. Other methods answer UNIMPLEMENTED. On SIGINT/SIGTERM it stops
// and prints the number of requests served, e.g. "normsvc_echo: served normalize=N
// stream_messages=M".
//
//   normsvc_echo [--address=127.0.0.1:50052] [--tls_cert_file=PEM --tls_key_file=PEM]
//   (port 0 picks a free port; the chosen address is printed as
//   "normsvc_echo listening on ADDR"; with the TLS files it serves TLS)
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "normsvc/v1/normalizer.grpc.pb.h"
#include "process_tuning.h"

namespace {

using normsvc::v1::NormalizeRequest;
using normsvc::v1::NormalizeResponse;
using normsvc::v1::NormalizeStreamResponse;

std::atomic<uint64_t> g_normalize_requests{0};
std::atomic<uint64_t> g_stream_messages{0};

void Echo(const NormalizeRequest& request, NormalizeResponse* response) {
  response->set_request_id(request.request_id());
  *response->mutable_output() = request.input();
}

// Echoes every message of one stream; writes go one at a time, in order.
class EchoStream : public grpc::ServerBidiReactor<NormalizeRequest, NormalizeStreamResponse> {
 public:
  EchoStream() { StartRead(&request_); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      std::lock_guard<std::mutex> lock(mutex_);
      reads_done_ = true;
      MaybeFinishLocked();
      return;
    }
    g_stream_messages.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      NormalizeStreamResponse& reply = replies_.emplace_back();
      reply.set_request_id(request_.request_id());
      Echo(request_, reply.mutable_response());
      if (replies_.size() == 1) StartWrite(&replies_.front());
    }
    StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mutex_);
    replies_.pop_front();
    if (!ok) {
      if (!finished_) {
        finished_ = true;
        Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
      }
      return;
    }
    if (!replies_.empty()) {
      StartWrite(&replies_.front());
    } else {
      MaybeFinishLocked();
    }
  }

  void OnDone() override { delete this; }

 private:
  void MaybeFinishLocked() {
    if (reads_done_ && replies_.empty() && !finished_) {
      finished_ = true;
      Finish(grpc::Status::OK);
    }
  }

  NormalizeRequest request_;
  std::mutex mutex_;
  std::deque<NormalizeStreamResponse> replies_;  // front is being written
  bool reads_done_ = false;
  bool finished_ = false;
};

class EchoService final : public normsvc::v1::Normalizer::CallbackService {
  grpc::ServerUnaryReactor* Normalize(grpc::CallbackServerContext* context,
                                      const NormalizeRequest* request,
                                      NormalizeResponse* response) override {
    g_normalize_requests.fetch_add(1, std::memory_order_relaxed);
    Echo(*request, response);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerBidiReactor<NormalizeRequest, NormalizeStreamResponse>* NormalizeStream(
      grpc::CallbackServerContext*) override {
    return new EchoStream();
  }

  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const normsvc::v1::GetServerInfoRequest*,
                                          normsvc::v1::GetServerInfoResponse* response) override {
    response->set_version("echo");
    response->set_backend("echo");
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + path);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string address = "127.0.0.1:50052";
  std::string cert_file, key_file;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--address=", 0) == 0) {
      address = arg.substr(10);
    } else if (arg.rfind("--tls_cert_file=", 0) == 0) {
      cert_file = arg.substr(16);
    } else if (arg.rfind("--tls_key_file=", 0) == 0) {
      key_file = arg.substr(15);
    } else if (arg == "--help") {
      std::printf(
          "usage: normsvc_echo [--address=HOST:PORT] [--tls_cert_file=PEM --tls_key_file=PEM]\n"
          "  default address 127.0.0.1:50052; port 0 = any free port\n");
      return 0;
    } else {
      std::fprintf(stderr, "normsvc_echo: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!cert_file.empty() || !key_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(cert_file), key = ReadPem(key_file);
    if (!cert.ok() || !key.ok()) {
      std::fprintf(stderr,
                   "normsvc_echo: --tls_cert_file and --tls_key_file must both be readable\n");
      return 2;
    }
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    credentials = grpc::SslServerCredentials(ssl);
  }
  normsvc::cli::TuneProcessForLoad();
  // Signals are taken synchronously by the main thread (blocked before any
  // gRPC thread starts, so those threads inherit the mask).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  EchoService service;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, credentials, &port);
  builder.SetMaxReceiveMessageSize(512 << 20);
  builder.SetMaxSendMessageSize(512 << 20);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "normsvc_echo: cannot listen on %s\n", address.c_str());
    return 1;
  }
  const std::string host = address.substr(0, address.rfind(':'));
  std::printf("normsvc_echo listening on %s:%d\n", host.c_str(), port);
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
  std::printf("normsvc_echo: served normalize=%llu stream_messages=%llu\n",
              static_cast<unsigned long long>(g_normalize_requests.load()),
              static_cast<unsigned long long>(g_stream_messages.load()));
  return 0;
}
