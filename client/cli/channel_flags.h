// The connection flags normctl and normload share.
#pragma once

#include "absl/status/statusor.h"
#include "args.h"
#include "normsvc/client/channel.h"

namespace normsvc::cli {

inline constexpr char kChannelFlagsHelp[] =
    R"(connection:
  --target HOST:PORT        server (default: $NORMSVC_TARGET, else 127.0.0.1:50051);
                            "dns:///name:port" with --lb round_robin spreads calls
                            over every address the name resolves to
  --lb pick_first|round_robin   load-balancing policy (default pick_first)
  --keepalive_ms MS         client keepalive ping interval (default 0 = off)
  --tls                     use TLS (also implied by any --tls_* file flag)
  --tls_ca_file PEM         CA certificates that verify the server (default: system roots)
  --tls_cert_file PEM       client certificate for mutual TLS (with --tls_key_file)
  --tls_key_file PEM        client private key
  --tls_server_name NAME    name to check in the server's certificate
  --auth_token_file FILE    bearer token sent with every call, for servers started
                            with --auth_token_file (trailing newline stripped);
                            without TLS it crosses the network readable
)";

// --retries, for tools that retry (normctl; normload counts every failure
// instead and refuses the flag).
inline constexpr char kRetriesFlagHelp[] =
    R"(  --retries N               attempts per call on UNAVAILABLE (default 3; 1 = none)
)";

// Reads the flags above (the caller has parsed `args`), and --retries when
// `read_retries` (otherwise the channel makes one attempt a call and a
// --retries left in `args` is unused, so CheckAllUsed refuses it).
absl::StatusOr<client::ChannelOptions> ChannelOptionsFromArgs(Args& args, bool read_retries);

}  // namespace normsvc::cli
