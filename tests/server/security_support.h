// Shared by the security tests: the run's certificates, TLS and plaintext
// channels, calls with or without an "authorization" entry, and a generic
// caller that reaches any method of a service descriptor with an empty
// message.
#pragma once

#include <memory>
#include <random>
#include <string>

#include <google/protobuf/descriptor.h>
#include <grpcpp/grpcpp.h>

#include "test_certificates.h"
#include "test_support.h"

namespace normsvc::server::testing {

using normsvc::testing::TestPki;

// The certificates of this test process, made on first use in a directory
// removed at exit. nullptr (and `error`) when openssl failed.
const TestPki* SharedPki(std::string* error);

// Writes `contents` to a fresh file in the process's temporary directory
// and returns its path.
std::string WriteTempFile(const std::string& name, const std::string& contents);

// What a client presents: the CA it trusts and, for mutual TLS, its
// certificate and key (empty: none).
struct ClientTls {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};
std::shared_ptr<grpc::Channel> PlaintextChannel(int port);
std::shared_ptr<grpc::Channel> TlsChannel(int port, const ClientTls& tls);

// A context with a deadline; `authorization` (when not empty) is sent as
// the "authorization" metadata value, e.g. "Bearer <token>".
std::unique_ptr<grpc::ClientContext> AuthorizedContext(const std::string& authorization,
                                                       double seconds = 10);

// One random LayerNorm forward call over `channel`. An OK reply is checked
// against the double-precision oracle (a mismatch is a test failure); the
// call's status is returned.
grpc::Status NormalizeChecked(const std::shared_ptr<grpc::Channel>& channel,
                              const std::string& authorization, std::mt19937_64& rng);

// GetServerInfo; its status and, when OK, the security it reports.
grpc::Status ServerSecurity(const std::shared_ptr<grpc::Channel>& channel,
                            const std::string& authorization,
                            v1::GetServerInfoResponse::Security* security);

// Calls `method` with an empty message (valid for every message type):
// unary, or a stream that half-closes at once. Returns the final status.
grpc::Status CallWithEmptyMessage(const std::shared_ptr<grpc::Channel>& channel,
                                  const google::protobuf::MethodDescriptor& method,
                                  const std::string& authorization);
// The same by path ("/package.Service/Method").
grpc::Status CallWithEmptyMessage(const std::shared_ptr<grpc::Channel>& channel,
                                  const std::string& path, bool streaming,
                                  const std::string& authorization);

}  // namespace normsvc::server::testing
