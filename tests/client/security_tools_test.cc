// The client side of TLS, mutual TLS and the bearer token, against a
// normsvc started with all three on loopback (certificates made for this
// run): the library's channel options, normctl's and normload's flags, and
// what each tool says when a piece is missing.
#include <cmath>
#include <fstream>

#include "../server/test_certificates.h"
#include "normsvc/client/channel.h"
#include "normsvc/client/client.h"
#include "tool_runner.h"

namespace normsvc::testing {
namespace {

const std::string kServer = NORMSVC_SERVER_PATH;
constexpr char kToken[] = "client-side-token_42";

class SecureServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    pki_ = new TestPki;
    if (!MakeTestPki(dir_->path(), pki_, &setup_error_)) return;
    WriteText(dir_->File("token"), std::string(kToken) + "\n");
    WriteText(dir_->File("wrong_token"), "not-the-token\n");
    WriteText(dir_->File("empty_token"), "");
    port_ = PickFreePort();
    server_ = new ChildProcess(
        {kServer, "--grpc_address=127.0.0.1:" + std::to_string(port_),
         "--metrics_address=", "--backend=cpu", "--tls_cert_file=" + pki_->server_cert,
         "--tls_key_file=" + pki_->server_key, "--tls_client_ca_file=" + pki_->ca_cert,
         "--auth_token_file=" + dir_->File("token")},
        dir_->File("normsvc.log"));
    if (!WaitForPort(port_, std::chrono::seconds(30))) setup_error_ = server_->Log();
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(SIGTERM, std::chrono::seconds(30)), 0) << server_->Log();
      delete server_;
    }
    delete pki_;
    delete dir_;
  }
  void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }

  static void WriteText(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  static std::string Target() { return "127.0.0.1:" + std::to_string(port_); }
  // normctl COMMAND with the connection flags; `drop` leaves one flag out.
  static std::vector<std::string> Normctl(std::vector<std::string> args,
                                          const std::string& token_file,
                                          const std::string& drop = "") {
    args.insert(args.begin(), kNormctl);
    for (const std::string& flag :
         {"--target=" + Target(), "--tls_ca_file=" + pki_->ca_cert,
          "--tls_cert_file=" + pki_->client_cert, "--tls_key_file=" + pki_->client_key}) {
      if (drop.empty() || flag.rfind(drop, 0) != 0) args.push_back(flag);
    }
    if (!token_file.empty()) args.push_back("--auth_token_file=" + token_file);
    args.push_back("--timeout_ms=10000");
    return args;
  }
  static client::ChannelOptions LibraryOptions() {
    client::ChannelOptions options;
    options.target = Target();
    options.use_tls = true;
    options.tls_ca_file = pki_->ca_cert;
    options.tls_cert_file = pki_->client_cert;
    options.tls_key_file = pki_->client_key;
    options.retry_max_attempts = 1;
    return options;
  }

  static TempDir* dir_;
  static TestPki* pki_;
  static ChildProcess* server_;
  static int port_;
  static std::string setup_error_;
};
TempDir* SecureServerTest::dir_ = nullptr;
TestPki* SecureServerTest::pki_ = nullptr;
ChildProcess* SecureServerTest::server_ = nullptr;
int SecureServerTest::port_ = 0;
std::string SecureServerTest::setup_error_;

TEST_F(SecureServerTest, LibraryChannelCarriesTheTokenOnUnaryCallsAndStreams) {
  client::ChannelOptions options = LibraryOptions();
  options.auth_token_file = dir_->File("token");
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = client::MakeChannel(options);
  ASSERT_TRUE(channel.ok()) << channel.status();
  client::NormalizerClient client(*channel);

  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.4f, 1.5f);
  constexpr int kRows = 3, kHidden = 80;
  std::vector<float> x(kRows * kHidden);
  for (float& value : x) value = normal(rng);
  v1::NormalizeRequest request;
  request.set_op(v1::RMS_NORM);
  request.mutable_input()->set_dtype(v1::FP32);
  request.mutable_input()->add_shape(kRows);
  request.mutable_input()->add_shape(kHidden);
  request.mutable_input()->set_data(x.data(), x.size() * sizeof(float));
  absl::StatusOr<v1::NormalizeResponse> response = client.Normalize(request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->output().data().size(), x.size() * sizeof(float));
  const auto* y = reinterpret_cast<const float*>(response->output().data().data());
  for (int r = 0; r < kRows; ++r) {
    double squares = 0;
    for (int h = 0; h < kHidden; ++h) squares += double(x[r * kHidden + h]) * x[r * kHidden + h];
    const double rstd = 1.0 / std::sqrt(squares / kHidden + 1e-5);
    for (int h = 0; h < kHidden; ++h) {
      const double expected = x[r * kHidden + h] * rstd;
      EXPECT_NEAR(y[r * kHidden + h], expected, 1e-5 * (1 + std::abs(expected)));
    }
  }
  // The stream goes through the same channel interceptor.
  absl::StatusOr<std::vector<v1::NormalizeStreamResponse>> streamed =
      client.NormalizeStreamAll({request, request});
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  ASSERT_EQ(streamed->size(), 2u);
  for (const auto& item : *streamed) EXPECT_TRUE(item.has_response()) << item.error().message();

  absl::StatusOr<v1::GetServerInfoResponse> info = client.GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->security().tls());
  EXPECT_TRUE(info->security().client_certificate_required());
  EXPECT_TRUE(info->security().bearer_token_required());
}

TEST_F(SecureServerTest, LibraryReportsTheServersRefusalAndBadTokenOptions) {
  // The token given directly instead of from a file.
  client::ChannelOptions direct = LibraryOptions();
  direct.auth_token = kToken;
  EXPECT_TRUE(client::NormalizerClient(*client::MakeChannel(direct)).GetServerInfo().ok());

  client::ChannelOptions none = LibraryOptions();
  absl::StatusOr<v1::GetServerInfoResponse> refused =
      client::NormalizerClient(*client::MakeChannel(none)).GetServerInfo();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated);
  // Health needs no token.
  absl::StatusOr<client::ServingStatus> health =
      client::NormalizerClient(*client::MakeChannel(none)).CheckHealth();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, client::ServingStatus::kServing);

  client::ChannelOptions both = LibraryOptions();
  both.auth_token = kToken;
  both.auth_token_file = dir_->File("token");
  EXPECT_EQ(client::MakeChannel(both).status().message(),
            "give the bearer token or a token file, not both");
  client::ChannelOptions empty = LibraryOptions();
  empty.auth_token_file = dir_->File("empty_token");
  EXPECT_EQ(client::MakeChannel(empty).status().message(),
            "auth token file '" + dir_->File("empty_token") + "' is empty");
  client::ChannelOptions missing = LibraryOptions();
  missing.auth_token_file = dir_->File("no_such_token");
  EXPECT_FALSE(client::MakeChannel(missing).ok());
  client::ChannelOptions spaced = LibraryOptions();
  spaced.auth_token = "two words";
  EXPECT_EQ(client::MakeChannel(spaced).status().message(),
            "the bearer token must be visible ASCII characters without spaces");
}

TEST_F(SecureServerTest, NormctlWithEveryFlagServesAndSaysWhatIsMissingOtherwise) {
  CommandResult info = RunCommand(Normctl({"info"}, dir_->File("token")));
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("security:   mutual TLS, bearer token required"), std::string::npos)
      << info.out;

  CommandResult no_token = RunCommand(Normctl({"info"}, ""));
  EXPECT_EQ(no_token.exit_code, 4);
  EXPECT_NE(no_token.err.find("normctl: UNAUTHENTICATED: this server requires a bearer token"),
            std::string::npos)
      << no_token.err;
  CommandResult wrong_token = RunCommand(Normctl({"info"}, dir_->File("wrong_token")));
  EXPECT_EQ(wrong_token.exit_code, 4);
  EXPECT_NE(wrong_token.err.find("UNAUTHENTICATED: invalid bearer token"), std::string::npos)
      << wrong_token.err;
  CommandResult empty_token = RunCommand(Normctl({"info"}, dir_->File("empty_token")));
  EXPECT_EQ(empty_token.exit_code, 2);
  EXPECT_NE(empty_token.err.find("is empty"), std::string::npos) << empty_token.err;

  // A key without its certificate is a usage error; with neither, the
  // handshake fails (the server requires a client certificate): no answer.
  CommandResult key_only = RunCommand(Normctl({"info"}, dir_->File("token"), "--tls_cert_file"));
  EXPECT_EQ(key_only.exit_code, 2) << key_only.err;
  EXPECT_NE(key_only.err.find("TLS client certificate and key must be given together"),
            std::string::npos)
      << key_only.err;
  CommandResult anonymous =
      RunCommand({kNormctl, "info", "--target=" + Target(), "--tls_ca_file=" + pki_->ca_cert,
                  "--auth_token_file=" + dir_->File("token"), "--timeout_ms=10000"});
  EXPECT_EQ(anonymous.exit_code, 5) << anonymous.err;
  EXPECT_NE(anonymous.err.find("UNAVAILABLE"), std::string::npos) << anonymous.err;

  // Health answers without a token.
  CommandResult health = RunCommand(Normctl({"health"}, ""));
  EXPECT_EQ(health.exit_code, 0) << health.err;
  EXPECT_EQ(health.out, "SERVING\n");
}

TEST_F(SecureServerTest, NormloadVerifiesResultsOverMutualTlsWithTheToken) {
  CommandResult run =
      RunCommand({kNormload, "--target=" + Target(), "--tls_ca_file=" + pki_->ca_cert,
                  "--tls_cert_file=" + pki_->client_cert, "--tls_key_file=" + pki_->client_key,
                  "--auth_token_file=" + dir_->File("token"), "--concurrency=4", "--channels=2",
                  "--warmup_s=0.2", "--duration_s=0.6", "--verify", "--quiet",
                  "--json=" + dir_->File("load.json"),
                  "--mix=op=layernorm,dtype=fp32,rows=2,hidden=256;op=rmsnorm,dtype=bf16,rows=1,"
                  "hidden=512,transport=stream"});
  ASSERT_EQ(run.exit_code, 0) << run.err << run.out;
  const google::protobuf::Struct report = ParseJson(ReadFile(dir_->File("load.json")));
  EXPECT_GT(Number(report, {"totals", "ok"}), 0);
  EXPECT_EQ(Number(report, {"totals", "errors"}), 0) << Field(report, "first_error").string_value();
  EXPECT_EQ(Number(report, {"measured", "verify_failures"}), 0);

  CommandResult refused =
      RunCommand({kNormload, "--target=" + Target(), "--tls_ca_file=" + pki_->ca_cert,
                  "--tls_cert_file=" + pki_->client_cert, "--tls_key_file=" + pki_->client_key,
                  "--concurrency=1", "--channels=1", "--warmup_s=0", "--duration_s=0.3", "--quiet",
                  "--mix=rows=1,hidden=64"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE((refused.err + refused.out).find("UNAUTHENTICATED"), std::string::npos)
      << refused.err << refused.out;
}

TEST(ToolHelpTest, NormctlAndNormloadDocumentTheTokenFlag) {
  for (const std::string& tool : {kNormctl, kNormload}) {
    const CommandResult help = RunCommand({tool, "--help"});
    EXPECT_EQ(help.exit_code, 0) << tool;
    EXPECT_NE(help.out.find("--auth_token_file FILE"), std::string::npos) << tool;
    EXPECT_NE(help.out.find("--tls_cert_file PEM"), std::string::npos) << tool;
  }
}

}  // namespace
}  // namespace normsvc::testing
