#include "security_support.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>
#include <gtest/gtest.h>

namespace normsvc::server::testing {
namespace {

normsvc::testing::TempDir& ProcessTempDir() {
  static auto* dir = new normsvc::testing::TempDir();
  return *dir;
}

std::string Target(int port) { return "127.0.0.1:" + std::to_string(port); }

grpc::ChannelArguments OwnConnection() {
  grpc::ChannelArguments arguments;
  // Each channel its own connection, so each test's handshake is its own.
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return arguments;
}

// A stream that writes nothing, half-closes and reads until the end.
class EmptyStream final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  void Start() {
    started_.store(true, std::memory_order_release);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    started_.load(std::memory_order_acquire);
    if (ok) StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    started_.load(std::memory_order_acquire);
    done_.set_value(status);
  }
  grpc::Status Wait() { return done_.get_future().get(); }

 private:
  grpc::ByteBuffer response_;
  std::promise<grpc::Status> done_;
  // Releases this object to gRPC's threads, which acquire it in the
  // reactions: gRPC orders the two in its core, where ThreadSanitizer cannot
  // see it.
  std::atomic<bool> started_{false};
};

}  // namespace

const TestPki* SharedPki(std::string* error) {
  static std::string* failure = new std::string;
  static const TestPki* pki = [] {
    auto* made = new TestPki;
    const std::string dir = ProcessTempDir().File("pki");
    std::filesystem::create_directories(dir);
    if (!normsvc::testing::MakeTestPki(dir, made, failure)) return static_cast<TestPki*>(nullptr);
    return made;
  }();
  if (pki == nullptr) *error = *failure;
  return pki;
}

std::string WriteTempFile(const std::string& name, const std::string& contents) {
  static std::atomic<int> serial{0};
  const std::string path = ProcessTempDir().File(std::to_string(serial++) + "-" + name);
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

std::shared_ptr<grpc::Channel> PlaintextChannel(int port) {
  return grpc::CreateCustomChannel(Target(port), grpc::InsecureChannelCredentials(),
                                   OwnConnection());
}

std::shared_ptr<grpc::Channel> TlsChannel(int port, const ClientTls& tls) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = normsvc::testing::ReadFile(tls.ca_file);
  if (!tls.cert_file.empty()) {
    ssl.pem_cert_chain = normsvc::testing::ReadFile(tls.cert_file);
    ssl.pem_private_key = normsvc::testing::ReadFile(tls.key_file);
  }
  return grpc::CreateCustomChannel(Target(port), grpc::SslCredentials(ssl), OwnConnection());
}

std::unique_ptr<grpc::ClientContext> AuthorizedContext(const std::string& authorization,
                                                       double seconds) {
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(seconds);
  if (!authorization.empty()) context->AddMetadata("authorization", authorization);
  return context;
}

grpc::Status NormalizeChecked(const std::shared_ptr<grpc::Channel>& channel,
                              const std::string& authorization, std::mt19937_64& rng) {
  ForwardCase c;
  c.shape = {3, 96};
  c.inline_gamma = c.inline_beta = true;
  const ForwardRequest made = MakeForwardRequest(rng, c, rng() % 1000);
  auto stub = v1::Normalizer::NewStub(channel);
  auto context = AuthorizedContext(authorization);
  v1::NormalizeResponse response;
  const grpc::Status status = stub->Normalize(context.get(), made.request, &response);
  if (status.ok()) {
    EXPECT_TRUE(CheckForward(made.request, made.gamma, made.beta, response));
  }
  return status;
}

grpc::Status ServerSecurity(const std::shared_ptr<grpc::Channel>& channel,
                            const std::string& authorization,
                            v1::GetServerInfoResponse::Security* security) {
  auto stub = v1::Normalizer::NewStub(channel);
  auto context = AuthorizedContext(authorization);
  v1::GetServerInfoResponse info;
  const grpc::Status status = stub->GetServerInfo(context.get(), {}, &info);
  *security = info.security();
  return status;
}

grpc::Status CallWithEmptyMessage(const std::shared_ptr<grpc::Channel>& channel,
                                  const google::protobuf::MethodDescriptor& method,
                                  const std::string& authorization) {
  return CallWithEmptyMessage(channel, "/" + method.service()->full_name() + "/" + method.name(),
                              method.client_streaming() || method.server_streaming(),
                              authorization);
}

grpc::Status CallWithEmptyMessage(const std::shared_ptr<grpc::Channel>& channel,
                                  const std::string& path, bool streaming,
                                  const std::string& authorization) {
  grpc::GenericStub stub(channel);
  auto context = AuthorizedContext(authorization);
  if (!streaming) {
    grpc::Slice empty(std::string{});
    grpc::ByteBuffer request(&empty, 1), response;
    AwaitedStatus done;
    stub.UnaryCall(context.get(), path, grpc::StubOptions(), &request, &response, done.Callback());
    return done.Wait();
  }
  EmptyStream stream;
  stub.PrepareBidiStreamingCall(context.get(), path, grpc::StubOptions(), &stream);
  grpc::ByteBuffer first;
  stream.StartRead(&first);
  stream.StartWritesDone();
  stream.Start();
  return stream.Wait();
}

}  // namespace normsvc::server::testing
