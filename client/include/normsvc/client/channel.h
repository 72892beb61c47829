// Channels to a normsvc server: load balancing, retries, keepalive and TLS
// configured from one plain struct.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/channel.h>

#include "absl/status/statusor.h"

namespace normsvc::client {

struct ChannelOptions {
  // gRPC target, e.g. "127.0.0.1:50051" or "dns:///normsvc.default.svc:50051".
  std::string target = "127.0.0.1:50051";

  // "pick_first" (one connection) or "round_robin" (one connection to every
  // address the name resolves to; use with a DNS name of several servers,
  // e.g. a Kubernetes headless service).
  std::string load_balancing_policy = "pick_first";

  // Retry policy for Normalizer calls, written into the service config.
  // max_attempts <= 1 disables retries. Retried codes: UNAVAILABLE (and
  // RESOURCE_EXHAUSTED when retry_resource_exhausted is set: the server
  // answers it at once when its queue is full, so a short back-off helps).
  int retry_max_attempts = 3;
  int retry_initial_backoff_ms = 50;
  int retry_max_backoff_ms = 1000;
  bool retry_resource_exhausted = false;
  // A complete service config JSON; when set it replaces the one built
  // from the fields above.
  std::string service_config_json;

  // Client keepalive pings (0 = off). Servers reject pings more frequent
  // than their policy allows, so keep this >= 10 s against normsvc.
  int keepalive_time_ms = 0;
  int keepalive_timeout_ms = 10000;
  bool keepalive_permit_without_calls = false;

  // Message size limits (-1 = unlimited). normsvc accepts up to 640 MiB by
  // default; replies are as large as requests.
  int max_receive_message_bytes = -1;
  int max_send_message_bytes = -1;

  // TLS: off when use_tls is false. With use_tls, the CA file verifies the
  // server (empty = the system roots); cert and key files give a client
  // certificate for mutual TLS (both or neither).
  bool use_tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Overrides the name checked against the server's certificate.
  std::string tls_server_name_override;

  // Bearer token for servers started with --auth_token_file: every call on
  // the channel carries the metadata "authorization: Bearer <token>".
  // Either the token itself or a file holding it (read once by MakeChannel,
  // trailing newline stripped), not both. Without TLS the token crosses the
  // network readable.
  std::string auth_token;
  std::string auth_token_file;

  // Give this channel its own connections instead of sharing subchannels
  // with other channels of the process (load generators use several
  // channels to spread work over several TCP connections).
  bool dedicated_connection = false;
};

// The service config JSON for `options` (load balancing and retry policy).
std::string BuildServiceConfigJson(const ChannelOptions& options);

// Creates a channel; fails only on unreadable TLS or token files or a
// malformed option. Connecting is lazy: errors reaching the server surface on calls.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ChannelOptions& options);

// The target normctl and the tests use when none is given: the environment
// variable NORMSVC_TARGET, else 127.0.0.1:50051.
std::string DefaultTarget();

}  // namespace normsvc::client
