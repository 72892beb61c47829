// Transport security of the gRPC port: plaintext, TLS, or mutual TLS, from
// the --tls_* flags. The PEM files are read and checked once at start-up
// (certificate and key parse and belong together, the client CA parses), so
// that a bad file stops the server with a message naming its flag instead
// of failing every handshake later. Certificates are not reloaded: rotating
// them takes a restart (a rolling one in Kubernetes).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class ServerCredentials;
}

namespace normsvc::server {

struct ServerOptions;

enum class TransportSecurity { kPlaintext, kTls, kMutualTls };
const char* TransportSecurityName(TransportSecurity security);

// What the --tls_* flags ask for (ValidateOptions has checked that they are
// consistent).
TransportSecurity RequestedTransportSecurity(const ServerOptions& options);

// The credentials for the gRPC listening port. Errors (FAILED_PRECONDITION)
// name the flag and the file: missing or unreadable, no PEM certificate or
// key in it, a key that does not match the certificate.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerOptions& options);

}  // namespace normsvc::server
