// Bearer-token authentication (--auth_token_file) on a plaintext port:
// the refusals and their messages, exact counts in the metrics, every RPC
// of both services refused without the token (found from the service
// descriptors, so a new RPC cannot slip through), health and reflection
// open, and no effect at all without the flag.
#include <cstring>

#include <google/protobuf/descriptor.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include "inference/grpc_service.grpc.pb.h"
#include "security_support.h"
#include "server/metrics.h"

namespace normsvc::server::testing {
namespace {

constexpr char kToken[] = "Zk9.q_x-7~+/token=";  // every character class the syntax allows
constexpr char kNormalizer[] = "normsvc.v1.Normalizer";
constexpr char kKserve[] = "inference.GRPCInferenceService";

const google::protobuf::ServiceDescriptor& Service(const char* name) {
  const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
  EXPECT_NE(service, nullptr) << name;
  return *service;
}

class TokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options = TestServerOptions();
    options.auth_token_file = WriteTempFile("token", std::string(kToken) + "\r\n");
    server_ = StartServer(options);
    ASSERT_NE(server_, nullptr);
    channel_ = PlaintextChannel(server_->grpc_port());
  }
  void TearDown() override {
    if (server_) {
      EXPECT_TRUE(server_->Stop());
    }
  }
  std::optional<double> Series(const std::string& family,
                               const std::map<std::string, std::string>& labels) {
    return SeriesValue(*server_->metrics().registry(), family, labels);
  }
  double RequestsTotal(const std::string& method, const char* op, const char* dtype,
                       const char* code) {
    return Series("normsvc_requests_total",
                  {{"method", method}, {"op", op}, {"dtype", dtype}, {"code", code}})
        .value_or(-1);
  }
  double Unauthenticated(const std::string& method) {
    return RequestsTotal(method, "none", "none", "UNAUTHENTICATED");
  }
  // Refusals over every method of both services.
  double UnauthenticatedTotal() {
    double total = 0;
    for (const char* service_name : {kNormalizer, kKserve}) {
      const google::protobuf::ServiceDescriptor& service = Service(service_name);
      for (int i = 0; i < service.method_count(); ++i) {
        total += Unauthenticated(service.method(i)->name());
      }
    }
    return total;
  }

  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::mt19937_64 rng_{TestSeed() + 601};
};

TEST_F(TokenTest, MissingOrWrongTokensAreRefusedAndTheRightOneServes) {
  const std::string bearer = std::string("Bearer ") + kToken;
  struct Refusal {
    const char* name;
    std::string authorization;
    const char* message;
  };
  const Refusal refusals[] = {
      {"no token", "",
       "this server requires a bearer token: send the metadata 'authorization: Bearer <token>'"},
      {"wrong token", "Bearer not-the-token", "invalid bearer token"},
      {"token with one more character", bearer + "x", "invalid bearer token"},
      {"token one character short", bearer.substr(0, bearer.size() - 1), "invalid bearer token"},
      {"empty token", "Bearer ", "invalid bearer token"},
      {"other scheme", std::string("Basic ") + kToken,
       "the 'authorization' metadata must be 'Bearer <token>'"},
      {"scheme without the space", std::string("Bearer") + kToken,
       "the 'authorization' metadata must be 'Bearer <token>'"},
  };
  for (const Refusal& refusal : refusals) {
    SCOPED_TRACE(refusal.name);
    const grpc::Status status = NormalizeChecked(channel_, refusal.authorization, rng_);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(status.error_message(), refusal.message);
  }
  // Two entries, even if one is right, are refused.
  {
    auto stub = v1::Normalizer::NewStub(channel_);
    auto context = AuthorizedContext(bearer);
    context->AddMetadata("authorization", "Bearer another");
    v1::GetServerInfoResponse info;
    const grpc::Status status = stub->GetServerInfo(context.get(), {}, &info);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(status.error_message(), "more than one 'authorization' metadata entry");
  }
  // The right token (the file's trailing CR/LF stripped); the scheme is
  // case-insensitive.
  constexpr int kAccepted = 4;
  for (int i = 0; i < kAccepted; ++i) {
    const std::string authorization = (i % 2 == 0 ? "Bearer " : "bEARER ") + std::string(kToken);
    const grpc::Status status = NormalizeChecked(channel_, authorization, rng_);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }

  // Exact counts: every refused Normalize under code UNAUTHENTICATED (op
  // and dtype "none": the request was never read), the accepted ones as OK.
  const double refused = std::size(refusals);
  EXPECT_EQ(Unauthenticated("Normalize"), refused);
  EXPECT_EQ(RequestsTotal("Normalize", "layer_norm", "fp32", "OK"), kAccepted);
  EXPECT_EQ(Unauthenticated("GetServerInfo"), 1);
  EXPECT_EQ(UnauthenticatedTotal(), refused + 1);
}

TEST_F(TokenTest, EveryRpcOfBothServicesNeedsTheToken) {
  const std::string bearer = std::string("Bearer ") + kToken;
  for (const char* service_name : {kNormalizer, kKserve}) {
    const google::protobuf::ServiceDescriptor& service = Service(service_name);
    ASSERT_GT(service.method_count(), 0);
    for (int i = 0; i < service.method_count(); ++i) {
      const google::protobuf::MethodDescriptor& method = *service.method(i);
      SCOPED_TRACE(method.full_name());
      const grpc::Status refused = CallWithEmptyMessage(channel_, method, "");
      EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED) << refused.error_message();
      const grpc::Status wrong = CallWithEmptyMessage(channel_, method, "Bearer wrong");
      EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED) << wrong.error_message();
      // With the token the call reaches the service: whatever it answers to
      // an empty message, it is neither a refusal nor a missing handler.
      const grpc::Status allowed = CallWithEmptyMessage(channel_, method, bearer);
      EXPECT_NE(allowed.error_code(), grpc::StatusCode::UNAUTHENTICATED) << allowed.error_message();
      EXPECT_NE(allowed.error_code(), grpc::StatusCode::UNIMPLEMENTED) << allowed.error_message();
    }
    // Each method counted its two refusals under its own name (a refused
    // stream counts once).
    for (int i = 0; i < service.method_count(); ++i) {
      EXPECT_EQ(Unauthenticated(service.method(i)->name()), 2) << service.method(i)->full_name();
    }
  }
}

TEST_F(TokenTest, HealthAndReflectionNeedNoToken) {
  grpc::GenericStub stub(channel_);
  for (const char* service : {"", kNormalizer}) {
    SCOPED_TRACE(service);
    // HealthCheckRequest { string service = 1; } -> { ServingStatus status = 1; }
    std::string request = std::string("\x0a", 1) + static_cast<char>(std::strlen(service));
    request += service;
    grpc::Slice slice(request);
    grpc::ByteBuffer request_buffer(&slice, 1), response_buffer;
    auto context = AuthorizedContext("");
    AwaitedStatus done;
    stub.UnaryCall(context.get(), "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                   &request_buffer, &response_buffer, done.Callback());
    const grpc::Status status = done.Wait();
    ASSERT_TRUE(status.ok()) << status.error_message();
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(response_buffer.Dump(&slices).ok());
    ASSERT_EQ(slices.size(), 1u);
    EXPECT_EQ(slices[0].size(), 2u);
    EXPECT_EQ(slices[0].begin()[1], 1) << "SERVING";
  }
  // Reflection answers without a token (it describes the public API only):
  // an empty stream ends OK.
  EXPECT_EQ(CallWithEmptyMessage(channel_,
                                 "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                 /*streaming=*/true, "")
                .error_code(),
            grpc::StatusCode::OK);
  EXPECT_EQ(UnauthenticatedTotal(), 0);
}

TEST(NoTokenTest, WithoutTheFlagNoCallNeedsAToken) {
  std::unique_ptr<Server> server = StartServer(TestServerOptions());
  ASSERT_NE(server, nullptr);
  const auto channel = PlaintextChannel(server->grpc_port());
  std::mt19937_64 rng(TestSeed() + 602);
  EXPECT_TRUE(NormalizeChecked(channel, "", rng).ok());
  // An authorization entry is ignored, not checked.
  EXPECT_TRUE(NormalizeChecked(channel, "Bearer anything", rng).ok());
  v1::GetServerInfoResponse::Security security;
  ASSERT_TRUE(ServerSecurity(channel, "", &security).ok());
  EXPECT_FALSE(security.tls());
  EXPECT_FALSE(security.client_certificate_required());
  EXPECT_FALSE(security.bearer_token_required());
  EXPECT_EQ(SeriesValue(
                *server->metrics().registry(), "normsvc_requests_total",
                {{"method", "Normalize"}, {"op", "layer_norm"}, {"dtype", "fp32"}, {"code", "OK"}}),
            2);
  EXPECT_TRUE(server->Stop());
}

}  // namespace
}  // namespace normsvc::server::testing
