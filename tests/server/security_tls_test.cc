// TLS and mutual TLS on the gRPC port, with certificates made for this run:
// a client that trusts the server's CA gets correct results; one that
// trusts another CA, or speaks plaintext, gets nothing; with a client CA
// configured, only clients with a certificate from that CA get through.
// The bearer token over TLS rides on the same connections; a plaintext
// health-only port serves probes that cannot speak TLS.
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include "security_support.h"

namespace normsvc::server::testing {
namespace {

constexpr char kToken[] = "tls-test-token.0123456789";

// grpc.health.v1.Health/Check of `service` over `channel`: the call's code
// and the serving status (1 SERVING, 2 NOT_SERVING).
std::pair<grpc::StatusCode, int> HealthCheck(const std::shared_ptr<grpc::Channel>& channel,
                                             const std::string& service) {
  grpc::GenericStub stub(channel);
  // HealthCheckRequest { string service = 1; } -> { ServingStatus status = 1; }
  std::string request = std::string("\x0a", 1) + static_cast<char>(service.size()) + service;
  grpc::Slice slice(request);
  grpc::ByteBuffer request_buffer(&slice, 1), response_buffer;
  auto context = ContextWithDeadline(10);
  AwaitedStatus done;
  stub.UnaryCall(context.get(), "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request_buffer, &response_buffer, done.Callback());
  const grpc::Status status = done.Wait();
  std::vector<grpc::Slice> slices;
  int serving = 0;
  if (status.ok() && response_buffer.Dump(&slices).ok() && slices.size() == 1 &&
      slices[0].size() == 2) {
    serving = slices[0].begin()[1];
  }
  return {status.error_code(), serving};
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    pki_ = SharedPki(&error);
    ASSERT_NE(pki_, nullptr) << error;
  }
  ServerOptions TlsOptions() const {
    ServerOptions options = TestServerOptions();
    options.tls_cert_file = pki_->server_cert;
    options.tls_key_file = pki_->server_key;
    return options;
  }
  ServerOptions MutualTlsOptions() const {
    ServerOptions options = TlsOptions();
    options.tls_client_ca_file = pki_->ca_cert;
    return options;
  }

  const TestPki* pki_ = nullptr;
  std::mt19937_64 rng_{TestSeed() + 501};
};

TEST_F(TlsTest, CallsSucceedWithTheServersCaAndFailWithAnUntrustedOne) {
  std::unique_ptr<Server> server = StartServer(TlsOptions());
  ASSERT_NE(server, nullptr);
  const int port = server->grpc_port();

  const auto trusted = TlsChannel(port, {pki_->ca_cert, "", ""});
  for (int i = 0; i < 3; ++i) {
    const grpc::Status status = NormalizeChecked(trusted, "", rng_);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
  v1::GetServerInfoResponse::Security security;
  ASSERT_TRUE(ServerSecurity(trusted, "", &security).ok());
  EXPECT_TRUE(security.tls());
  EXPECT_FALSE(security.client_certificate_required());
  EXPECT_FALSE(security.bearer_token_required());

  // The handshake fails: the server's chain does not lead to the client's CA.
  const grpc::Status untrusted =
      NormalizeChecked(TlsChannel(port, {pki_->other_ca_cert, "", ""}), "", rng_);
  EXPECT_EQ(untrusted.error_code(), grpc::StatusCode::UNAVAILABLE) << untrusted.error_message();
  // A plaintext client cannot talk to a TLS-only port.
  const grpc::Status plaintext = NormalizeChecked(PlaintextChannel(port), "", rng_);
  EXPECT_EQ(plaintext.error_code(), grpc::StatusCode::UNAVAILABLE) << plaintext.error_message();
  // Neither refusal disturbed the server: the trusted channel still works.
  EXPECT_TRUE(NormalizeChecked(trusted, "", rng_).ok());
  EXPECT_TRUE(server->Stop());
}

TEST_F(TlsTest, MutualTlsAcceptsOnlyClientCertificatesFromTheConfiguredCa) {
  std::unique_ptr<Server> server = StartServer(MutualTlsOptions());
  ASSERT_NE(server, nullptr);
  const int port = server->grpc_port();

  const grpc::Status no_certificate =
      NormalizeChecked(TlsChannel(port, {pki_->ca_cert, "", ""}), "", rng_);
  EXPECT_EQ(no_certificate.error_code(), grpc::StatusCode::UNAVAILABLE)
      << no_certificate.error_message();
  const grpc::Status wrong_ca = NormalizeChecked(
      TlsChannel(port, {pki_->ca_cert, pki_->other_client_cert, pki_->other_client_key}), "", rng_);
  EXPECT_EQ(wrong_ca.error_code(), grpc::StatusCode::UNAVAILABLE) << wrong_ca.error_message();
  // The server's own certificate is signed by the CA but is not a client
  // certificate (extendedKeyUsage serverAuth only): refused too.
  const grpc::Status server_certificate = NormalizeChecked(
      TlsChannel(port, {pki_->ca_cert, pki_->server_cert, pki_->server_key}), "", rng_);
  EXPECT_EQ(server_certificate.error_code(), grpc::StatusCode::UNAVAILABLE)
      << server_certificate.error_message();

  const auto accepted = TlsChannel(port, {pki_->ca_cert, pki_->client_cert, pki_->client_key});
  for (int i = 0; i < 3; ++i) {
    const grpc::Status status = NormalizeChecked(accepted, "", rng_);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
  v1::GetServerInfoResponse::Security security;
  ASSERT_TRUE(ServerSecurity(accepted, "", &security).ok());
  EXPECT_TRUE(security.tls());
  EXPECT_TRUE(security.client_certificate_required());
  EXPECT_FALSE(security.bearer_token_required());
  EXPECT_TRUE(server->Stop());
}

TEST_F(TlsTest, BearerTokenOverMutualTls) {
  ServerOptions options = MutualTlsOptions();
  options.auth_token_file = WriteTempFile("token", std::string(kToken) + "\n");
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  const auto channel =
      TlsChannel(server->grpc_port(), {pki_->ca_cert, pki_->client_cert, pki_->client_key});
  const std::string bearer = std::string("Bearer ") + kToken;

  // A valid client certificate is not enough: the token is checked too.
  const grpc::Status no_token = NormalizeChecked(channel, "", rng_);
  EXPECT_EQ(no_token.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const grpc::Status wrong_token = NormalizeChecked(channel, bearer + "x", rng_);
  EXPECT_EQ(wrong_token.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(wrong_token.error_message(), "invalid bearer token");
  EXPECT_TRUE(NormalizeChecked(channel, bearer, rng_).ok());

  v1::GetServerInfoResponse::Security security;
  ASSERT_TRUE(ServerSecurity(channel, bearer, &security).ok());
  EXPECT_TRUE(security.tls());
  EXPECT_TRUE(security.client_certificate_required());
  EXPECT_TRUE(security.bearer_token_required());
  EXPECT_TRUE(server->Stop());
}

TEST_F(TlsTest, ServerCertificateChecksTheNameTheClientDialed) {
  // The certificate names 127.0.0.1 and localhost; a client that expects
  // another name refuses it.
  std::unique_ptr<Server> server = StartServer(TlsOptions());
  ASSERT_NE(server, nullptr);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = normsvc::testing::ReadFile(pki_->ca_cert);
  for (const auto& [name, expect_ok] :
       {std::pair{"localhost", true}, std::pair{"normsvc.example.com", false}}) {
    SCOPED_TRACE(name);
    grpc::ChannelArguments arguments;
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    arguments.SetSslTargetNameOverride(name);
    const auto channel = grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(server->grpc_port()), grpc::SslCredentials(ssl), arguments);
    const grpc::Status status = NormalizeChecked(channel, "", rng_);
    EXPECT_EQ(status.ok(), expect_ok) << status.error_message();
    if (!expect_ok) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
    }
  }
  EXPECT_TRUE(server->Stop());
}

TEST_F(TlsTest, PlaintextHealthPortMirrorsTheTlsPortAndServesNothingElse) {
  // For probes that cannot speak TLS (the kubelet's): --health_address.
  ServerOptions options = MutualTlsOptions();
  options.auth_token_file = WriteTempFile("token", kToken);
  options.health_address = "127.0.0.1:0";
  options.drain_grace_ms = 500;  // the window in which health must say NOT_SERVING
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->health_port(), 0);
  ASSERT_NE(server->health_port(), server->grpc_port());
  const auto health = PlaintextChannel(server->health_port());
  for (const char* service : {"", "normsvc.v1.Normalizer"}) {
    EXPECT_EQ(HealthCheck(health, service), std::make_pair(grpc::StatusCode::OK, 1)) << service;
  }
  // No other RPC is served there, token or not.
  EXPECT_EQ(NormalizeChecked(health, std::string("Bearer ") + kToken, rng_).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(HealthCheck(health, "inference.GRPCInferenceService").first,
            grpc::StatusCode::NOT_FOUND);

  // The stop turns it NOT_SERVING with the main port.
  std::thread stopper([&] { EXPECT_TRUE(server->Stop()); });
  bool saw_not_serving = false;
  for (int i = 0; i < 200 && !saw_not_serving; ++i) {
    const auto [code, serving] = HealthCheck(health, "normsvc.v1.Normalizer");
    if (code != grpc::StatusCode::OK) break;  // already shut down
    saw_not_serving = serving == 2;
    if (!saw_not_serving) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stopper.join();
  EXPECT_TRUE(saw_not_serving);
}

}  // namespace
}  // namespace normsvc::server::testing
