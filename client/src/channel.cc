#include "normsvc/client/channel.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/client_interceptor.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace normsvc::client {
namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", what, " file '", path, "'"));
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::string Seconds(int ms) { return absl::StrCat(ms / 1000.0, "s"); }

// Adds "authorization: Bearer <token>" to every call of the channel.
class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string& header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", header_);
    }
    methods->Proceed();
  }

 private:
  const std::string& header_;  // owned by the factory, which the channel keeps
};

class BearerTokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(const std::string& token)
      : header_(absl::StrCat("Bearer ", token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(header_);
  }

 private:
  const std::string header_;
};

// The token from `options`, "" for none.
absl::StatusOr<std::string> BearerToken(const ChannelOptions& options) {
  if (options.auth_token_file.empty()) return options.auth_token;
  if (!options.auth_token.empty()) {
    return absl::InvalidArgumentError("give the bearer token or a token file, not both");
  }
  absl::StatusOr<std::string> token = ReadWholeFile(options.auth_token_file, "auth token");
  if (!token.ok()) return token.status();
  while (!token->empty() && (token->back() == '\n' || token->back() == '\r')) token->pop_back();
  if (token->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth token file '", options.auth_token_file, "' is empty"));
  }
  return token;
}

}  // namespace

std::string BuildServiceConfigJson(const ChannelOptions& options) {
  std::string json =
      absl::StrCat(R"({"loadBalancingConfig":[{")", options.load_balancing_policy, R"(":{}}])");
  if (options.retry_max_attempts > 1) {
    std::string codes = R"("UNAVAILABLE")";
    if (options.retry_resource_exhausted) absl::StrAppend(&codes, R"(,"RESOURCE_EXHAUSTED")");
    absl::StrAppend(&json, R"(,"methodConfig":[{"name":[{"service":"normsvc.v1.Normalizer"}],)",
                    R"("retryPolicy":{"maxAttempts":)", options.retry_max_attempts,
                    R"(,"initialBackoff":")", Seconds(options.retry_initial_backoff_ms),
                    R"(","maxBackoff":")", Seconds(options.retry_max_backoff_ms),
                    R"(","backoffMultiplier":2,"retryableStatusCodes":[)", codes, "]}}]");
  }
  json += "}";
  return json;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ChannelOptions& options) {
  if (options.target.empty()) return absl::InvalidArgumentError("empty target");
  if (options.load_balancing_policy != "pick_first" &&
      options.load_balancing_policy != "round_robin") {
    return absl::InvalidArgumentError(absl::StrCat("unknown load balancing policy '",
                                                   options.load_balancing_policy,
                                                   "' (pick_first or round_robin)"));
  }
  grpc::ChannelArguments args;
  args.SetServiceConfigJSON(options.service_config_json.empty() ? BuildServiceConfigJson(options)
                                                                : options.service_config_json);
  // The client's config is authoritative; ignore configs published in DNS.
  args.SetInt(GRPC_ARG_SERVICE_CONFIG_DISABLE_RESOLUTION, 1);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, options.retry_max_attempts > 1 ? 1 : 0);
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  args.SetMaxSendMessageSize(options.max_send_message_bytes);
  if (options.keepalive_time_ms > 0) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, options.keepalive_time_ms);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, options.keepalive_timeout_ms);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
                options.keepalive_permit_without_calls ? 1 : 0);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  if (options.dedicated_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);

  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.use_tls) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_ca_file.empty()) {
      absl::StatusOr<std::string> ca = ReadWholeFile(options.tls_ca_file, "TLS CA");
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *std::move(ca);
    }
    if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
      return absl::InvalidArgumentError("TLS client certificate and key must be given together");
    }
    if (!options.tls_cert_file.empty()) {
      absl::StatusOr<std::string> cert = ReadWholeFile(options.tls_cert_file, "TLS certificate");
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadWholeFile(options.tls_key_file, "TLS key");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *std::move(cert);
      ssl.pem_private_key = *std::move(key);
    }
    if (!options.tls_server_name_override.empty()) {
      args.SetSslTargetNameOverride(options.tls_server_name_override);
    }
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  absl::StatusOr<std::string> token = BearerToken(options);
  if (!token.ok()) return token.status();
  if (token->empty()) return grpc::CreateCustomChannel(options.target, credentials, args);
  for (const char c : *token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          "the bearer token must be visible ASCII characters without spaces");
    }
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<BearerTokenInterceptorFactory>(*token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(options.target, credentials, args,
                                                                 std::move(interceptors));
}

std::string DefaultTarget() {
  const char* from_env = std::getenv("NORMSVC_TARGET");
  if (from_env != nullptr && from_env[0] != '\0') return from_env;
  return "127.0.0.1:50051";
}

}  // namespace normsvc::client
