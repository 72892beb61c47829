// Start-up with the security flags: every bad file stops the server with a
// message naming its flag (in process, and through the normsvc binary with
// its exit status); flags that do not go together are refused while
// parsing; --help documents the flags; a binary started with mutual TLS, a
// token and the metrics endpoint on 127.0.0.1 serves, listens for metrics
// on loopback only, and exits 0 on SIGTERM.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "security_support.h"

namespace normsvc::server::testing {
namespace {

// The normsvc binary: NORMSVC_SERVER_BINARY when set, else the build's.
std::string ServerBinary() {
  return normsvc::testing::ProgramPath("NORMSVC_SERVER_BINARY", NORMSVC_SERVER_PATH);
}

using normsvc::testing::RunCommand;

constexpr char kMappedPrefix[] = "0000000000000000FFFF0000";

// Local addresses (hex, as /proc/net/tcp writes them) listening on `port`;
// "0100007F" is 127.0.0.1, "00000000" every IPv4 interface.
std::vector<std::string> ListeningAddresses(int port) {
  std::vector<std::string> addresses;
  char port_hex[8];
  std::snprintf(port_hex, sizeof(port_hex), "%04X", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const size_t colon = local.find(':');
      if (state == "0A" && colon != std::string::npos && local.substr(colon + 1) == port_hex) {
        std::string address = local.substr(0, colon);
        // An IPv6 socket bound to an IPv4-mapped address (::ffff:a.b.c.d)
        // listens on that IPv4 address only.
        if (address.size() == 32 && address.rfind(kMappedPrefix, 0) == 0) {
          address = address.substr(24);
        }
        addresses.push_back(address);
      }
    }
  }
  return addresses;
}

class StartupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    pki_ = SharedPki(&error);
    ASSERT_NE(pki_, nullptr) << error;
  }
  ServerOptions MutualTls() const {
    ServerOptions options = TestServerOptions();
    options.tls_cert_file = pki_->server_cert;
    options.tls_key_file = pki_->server_key;
    options.tls_client_ca_file = pki_->ca_cert;
    return options;
  }
  const TestPki* pki_ = nullptr;
};

TEST_F(StartupTest, EveryBadFileIsAStartupErrorNamingItsFlag) {
  const std::string directory = std::filesystem::path(pki_->ca_cert).parent_path().string();
  const std::string not_pem = WriteTempFile("not.pem", "not a certificate\n");
  const std::string encrypted_key = WriteTempFile("encrypted.key", "");
  const normsvc::testing::CommandResult encrypted =
      RunCommand({normsvc::testing::OpensslProgram(), "pkey", "-in", pki_->server_key, "-aes256",
                  "-passout", "pass:secret", "-out", encrypted_key});
  ASSERT_EQ(encrypted.exit_code, 0) << encrypted.err;
  struct Case {
    const char* name;
    std::function<void(ServerOptions&)> mutate;
    std::string message;  // the whole status message
  };
  const Case cases[] = {
      {"missing certificate", [](auto& o) { o.tls_cert_file = "/nonexistent/server.pem"; },
       "--tls_cert_file: cannot read '/nonexistent/server.pem': No such file or directory"},
      {"missing key", [](auto& o) { o.tls_key_file = "/nonexistent/server.key"; },
       "--tls_key_file: cannot read '/nonexistent/server.key': No such file or directory"},
      {"certificate is a directory", [&](auto& o) { o.tls_cert_file = directory; },
       "--tls_cert_file: cannot read '" + directory + "': is a directory"},
      {"certificate file without a certificate", [&](auto& o) { o.tls_cert_file = not_pem; },
       "--tls_cert_file: '" + not_pem + "' holds no PEM certificate"},
      {"key file holding a certificate", [&](auto& o) { o.tls_key_file = pki_->server_cert; },
       "--tls_key_file: '" + pki_->server_cert +
           "' holds no PEM private key (an encrypted key is not supported)"},
      {"encrypted key", [&](auto& o) { o.tls_key_file = encrypted_key; },
       "--tls_key_file: '" + encrypted_key +
           "' holds no PEM private key (an encrypted key is not supported)"},
      {"key of another certificate", [&](auto& o) { o.tls_key_file = pki_->client_key; },
       "--tls_key_file: '" + pki_->client_key + "' does not match the certificate in " +
           "--tls_cert_file '" + pki_->server_cert + "'"},
      {"missing client CA", [](auto& o) { o.tls_client_ca_file = "/nonexistent/ca.pem"; },
       "--tls_client_ca_file: cannot read '/nonexistent/ca.pem': No such file or directory"},
      {"client CA without a certificate", [&](auto& o) { o.tls_client_ca_file = pki_->client_key; },
       "--tls_client_ca_file: '" + pki_->client_key + "' holds no PEM certificate"},
      {"missing token file", [](auto& o) { o.auth_token_file = "/nonexistent/token"; },
       "--auth_token_file: cannot read '/nonexistent/token': No such file or directory"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ServerOptions options = MutualTls();
    c.mutate(options);
    Server server(options);
    const absl::Status status = server.Start();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(status.message(), c.message);
    EXPECT_EQ(server.grpc_port(), 0);  // nothing was bound
  }
  // Token files: an empty one (a lone newline included) and one that is not
  // one line of visible ASCII.
  for (const auto& [contents, message] :
       {std::pair<std::string, std::string>{"", "is empty (it must hold the token)"},
        {"\n", "is empty (it must hold the token)"},
        {"two words\n", "must be one line of visible ASCII characters (no spaces)"},
        {"line1\nline2\n", "must be one line of visible ASCII characters (no spaces)"}}) {
    SCOPED_TRACE(contents);
    ServerOptions options = TestServerOptions();
    options.auth_token_file = WriteTempFile("token", contents);
    Server server(options);
    const absl::Status status = server.Start();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(status.message().rfind("--auth_token_file: ", 0), 0u) << status.message();
    EXPECT_NE(status.message().find(message), std::string::npos) << status.message();
  }
  // A file the server may not read (root reads every file: only as others).
  if (geteuid() != 0) {
    const std::string locked = WriteTempFile("locked.key", "x");
    std::filesystem::permissions(locked, std::filesystem::perms::none);
    ServerOptions options = MutualTls();
    options.tls_key_file = locked;
    Server server(options);
    EXPECT_EQ(server.Start().message(),
              "--tls_key_file: cannot read '" + locked + "': Permission denied");
  }
}

TEST(SecurityFlagsTest, FlagsThatBelongTogetherAreCheckedWhileParsing) {
  const auto no_env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--tls_cert_file=a.pem"},
       "--tls_cert_file and --tls_key_file must be set together (only --tls_cert_file is set)"},
      {{"--tls_key_file=a.key"},
       "--tls_cert_file and --tls_key_file must be set together (only --tls_key_file is set)"},
      {{"--tls_client_ca_file=ca.pem"},
       "--tls_client_ca_file needs --tls_cert_file and --tls_key_file (mutual TLS is TLS with "
       "client certificates)"},
  };
  for (const auto& [args, message] : cases) {
    absl::StatusOr<CommandLine> parsed = ParseCommandLine(args, no_env);
    EXPECT_EQ(parsed.status().message(), message);
  }
  const std::map<std::string, std::string> env = {{"NORMSVC_TLS_CERT_FILE", "s.pem"},
                                                  {"NORMSVC_TLS_KEY_FILE", "s.key"},
                                                  {"NORMSVC_TLS_CLIENT_CA_FILE", "ca.pem"},
                                                  {"NORMSVC_AUTH_TOKEN_FILE", "token"}};
  absl::StatusOr<CommandLine> parsed =
      ParseCommandLine({"--auth_token_file=/run/token"}, [&](const std::string& name) {
        auto it = env.find(name);
        return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
      });
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->options.tls_cert_file, "s.pem");
  EXPECT_EQ(parsed->options.tls_key_file, "s.key");
  EXPECT_EQ(parsed->options.tls_client_ca_file, "ca.pem");
  EXPECT_EQ(parsed->options.auth_token_file, "/run/token");  // the command line wins
}

TEST(SecurityFlagsTest, HelpDocumentsTheSecurityFlags) {
  const normsvc::testing::CommandResult help = RunCommand({ServerBinary(), "--help"});
  ASSERT_EQ(help.exit_code, 0);
  for (const char* text :
       {"--tls_cert_file (env NORMSVC_TLS_CERT_FILE", "--tls_key_file (env NORMSVC_TLS_KEY_FILE",
        "--tls_client_ca_file (env NORMSVC_TLS_CLIENT_CA_FILE", "mutual TLS",
        "--auth_token_file (env NORMSVC_AUTH_TOKEN_FILE", "'authorization: Bearer <token>'",
        "UNAUTHENTICATED", "grpc.health.v1", "127.0.0.1:9464",
        "--health_address (env NORMSVC_HEALTH_ADDRESS", "probes that cannot speak TLS"}) {
    EXPECT_NE(help.out.find(text), std::string::npos) << text;
  }
}

TEST_F(StartupTest, TheBinaryExitsWithAMessageNamingTheFlag) {
  const std::string empty_token = WriteTempFile("token", "\n");
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string message;
  };
  const Case cases[] = {
      {{"--tls_cert_file=" + pki_->server_cert, "--tls_key_file=" + pki_->client_key},
       1,
       "could not start: --tls_key_file: '" + pki_->client_key + "' does not match"},
      {{"--auth_token_file=" + empty_token},
       1,
       "could not start: --auth_token_file: '" + empty_token + "' is empty"},
      {{"--tls_client_ca_file=" + pki_->ca_cert},
       2,
       "normsvc: --tls_client_ca_file needs --tls_cert_file and --tls_key_file"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {ServerBinary(), "--grpc_address=127.0.0.1:0",
                                     "--metrics_address=", "--backend=cpu"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const normsvc::testing::CommandResult result = RunCommand(argv, std::chrono::seconds(30));
    EXPECT_EQ(result.exit_code, c.exit_code) << result.err;
    EXPECT_NE(result.err.find(c.message), std::string::npos) << result.err;
  }
}

TEST_F(StartupTest, BinaryWithMutualTlsTokenAndLoopbackMetricsServesAndExitsCleanly) {
  const int grpc_port = normsvc::testing::PickFreePort();
  const int metrics_port = normsvc::testing::PickFreePort();
  const std::string token = "binary-test-token";
  normsvc::testing::ChildProcess server(
      {ServerBinary(), "--grpc_address=127.0.0.1:" + std::to_string(grpc_port),
       "--metrics_address=127.0.0.1:" + std::to_string(metrics_port), "--backend=cpu",
       "--tls_cert_file=" + pki_->server_cert, "--tls_key_file=" + pki_->server_key,
       "--tls_client_ca_file=" + pki_->ca_cert,
       "--auth_token_file=" + WriteTempFile("token", token + "\n"), "--drain_timeout_s=5"},
      WriteTempFile("normsvc.log", ""));
  ASSERT_TRUE(normsvc::testing::WaitForPort(grpc_port, std::chrono::seconds(20))) << server.Log();
  ASSERT_TRUE(normsvc::testing::WaitForPort(metrics_port, std::chrono::seconds(20)));

  auto channel = TlsChannel(grpc_port, {pki_->ca_cert, pki_->client_cert, pki_->client_key});
  std::mt19937_64 rng(TestSeed() + 701);
  EXPECT_EQ(NormalizeChecked(channel, "", rng).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(NormalizeChecked(channel, "Bearer " + token, rng).ok());

  // The metrics endpoint: plain HTTP on 127.0.0.1 only, never on all
  // interfaces, and it counted the refusal.
  EXPECT_EQ(ListeningAddresses(metrics_port), std::vector<std::string>{"0100007F"});
  EXPECT_EQ(ListeningAddresses(grpc_port), std::vector<std::string>{"0100007F"});
  const std::string metrics = normsvc::testing::HttpGet(metrics_port, "/metrics");
  int refusals_counted = 0;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("normsvc_requests_total{", 0) == 0 &&
        line.find("method=\"Normalize\"") != std::string::npos &&
        line.find("code=\"UNAUTHENTICATED\"") != std::string::npos &&
        line.find("op=\"none\"") != std::string::npos &&
        line.find("dtype=\"none\"") != std::string::npos) {
      EXPECT_EQ(line.substr(line.rfind(' ') + 1), "1") << line;
      ++refusals_counted;
    }
  }
  EXPECT_EQ(refusals_counted, 1) << metrics.substr(0, 300);

  // Close the connection first: gRPC's shutdown waits for connected
  // clients to hang up after its GOAWAY, up to the drain timeout.
  channel.reset();
  EXPECT_EQ(server.Stop(SIGTERM, std::chrono::seconds(20)), 0) << server.Log();
  EXPECT_NE(server.Log().find("(mutual TLS, bearer token required)"), std::string::npos)
      << server.Log();
}

TEST(MetricsBindTest, MetricsOn127001ListenOnLoopbackOnly) {
  // One listening socket, on 127.0.0.1 (an endpoint on every interface
  // would show as 00000000 or in /proc/net/tcp6).
  ServerOptions options = TestServerOptions();
  options.metrics_address = "127.0.0.1:0";
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->metrics_port(), 0);
  EXPECT_EQ(ListeningAddresses(server->metrics_port()), std::vector<std::string>{"0100007F"});
  EXPECT_NE(normsvc::testing::HttpGet(server->metrics_port(), "/metrics")
                .find("# TYPE normsvc_requests_total counter"),
            std::string::npos);
  EXPECT_TRUE(server->Stop());
}

}  // namespace
}  // namespace normsvc::server::testing
