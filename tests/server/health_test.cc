// grpc.health.v1 and server reflection, spoken at the byte level through
// the generic stub (the test needs no generated code for either service).
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>
#include <gtest/gtest.h>

#include "test_support.h"

namespace normsvc::server::testing {
namespace {

std::string ToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (buffer.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  return bytes;
}

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::shared_ptr<grpc::Channel> Channel(int port) {
  return grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                             grpc::InsecureChannelCredentials());
}

// grpc.health.v1.Health/Check for `service`: the status code of the call
// and the serving status (1 SERVING, 2 NOT_SERVING).
std::pair<grpc::StatusCode, int> HealthCheck(int port, const std::string& service) {
  grpc::GenericStub stub(Channel(port));
  // HealthCheckRequest { string service = 1; }
  std::string request;
  request.push_back('\x0a');
  request.push_back(static_cast<char>(service.size()));
  request.append(service);
  grpc::ByteBuffer request_buffer = ToBuffer(request), response_buffer;
  auto context = ContextWithDeadline(10);
  AwaitedStatus done;
  stub.UnaryCall(context.get(), "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request_buffer, &response_buffer, done.Callback());
  const grpc::Status status = done.Wait();
  // HealthCheckResponse { ServingStatus status = 1; }
  const std::string response = ToString(response_buffer);
  const int serving = response.size() == 2 && response[0] == '\x08' ? response[1] : 0;
  return {status.error_code(), serving};
}

TEST(HealthTest, ServerAndServiceReportServing) {
  std::unique_ptr<Server> server = StartServer(TestServerOptions());
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(HealthCheck(server->grpc_port(), ""), std::make_pair(grpc::StatusCode::OK, 1));
  EXPECT_EQ(HealthCheck(server->grpc_port(), "normsvc.v1.Normalizer"),
            std::make_pair(grpc::StatusCode::OK, 1));
  EXPECT_EQ(HealthCheck(server->grpc_port(), "no.such.Service").first, grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(server->Stop());
}

TEST(HealthTest, NotServingOnceTheStopBegins) {
  ServerOptions options = TestServerOptions();
  options.drain_grace_ms = 500;  // the window in which health must say NOT_SERVING
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  const int port = server->grpc_port();
  ASSERT_EQ(HealthCheck(port, "normsvc.v1.Normalizer").second, 1);
  std::thread stopper([&] { EXPECT_TRUE(server->Stop()); });
  bool saw_not_serving = false;
  for (int i = 0; i < 200 && !saw_not_serving; ++i) {
    const auto [code, serving] = HealthCheck(port, "normsvc.v1.Normalizer");
    if (code != grpc::StatusCode::OK) break;  // already shut down
    saw_not_serving = serving == 2;
    if (!saw_not_serving) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stopper.join();
  EXPECT_TRUE(saw_not_serving);
}

TEST(ReflectionTest, ListsTheNormalizerService) {
  std::unique_ptr<Server> server = StartServer(TestServerOptions());
  ASSERT_NE(server, nullptr);
  grpc::GenericStub stub(Channel(server->grpc_port()));
  grpc::CompletionQueue queue;
  auto context = ContextWithDeadline(10);
  auto call = stub.PrepareCall(
      context.get(), "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &queue);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](intptr_t expected) {
    return queue.Next(&tag, &ok) && ok && reinterpret_cast<intptr_t>(tag) == expected;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(step(1));
  // ServerReflectionRequest { string list_services = 7; }
  call->Write(ToBuffer(std::string("\x3a\x00", 2)), reinterpret_cast<void*>(2));
  ASSERT_TRUE(step(2));
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(3));
  ASSERT_TRUE(step(3));
  EXPECT_NE(ToString(response).find("normsvc.v1.Normalizer"), std::string::npos);
  EXPECT_NE(ToString(response).find("grpc.health.v1.Health"), std::string::npos);
  call->WritesDone(reinterpret_cast<void*>(4));
  ASSERT_TRUE(step(4));
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  ASSERT_TRUE(step(5));
  EXPECT_TRUE(status.ok()) << status.error_message();
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  EXPECT_TRUE(server->Stop());
}

}  // namespace
}  // namespace normsvc::server::testing
