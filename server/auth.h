// Bearer-token authentication (--auth_token_file): the token a client must
// send as the metadata "authorization: Bearer <token>". The check reads the
// call's metadata and compares in constant time; it never blocks, so it runs
// inline on the gRPC thread at the top of each call (auth_services.h).
// It works the same over plaintext and TLS; over plaintext the token
// crosses the network readable, so pair it with TLS outside a trusted
// network.
#pragma once

#include <map>
#include <string>

#include <grpcpp/support/string_ref.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace normsvc::server {

// True when `a` and `b` are equal. The time taken depends on the lengths
// only, never on where the first difference is.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

class BearerTokenAuth {
 public:
  // Reads the token from --auth_token_file: trailing CR/LF are stripped;
  // an empty token, or one with characters other than visible ASCII (no
  // spaces, as metadata values and the Bearer syntax require), is
  // FAILED_PRECONDITION naming the flag.
  static absl::StatusOr<BearerTokenAuth> FromFile(const std::string& path);
  // `token`: non-empty visible ASCII (the caller checked).
  explicit BearerTokenAuth(std::string token) : token_(std::move(token)) {}

  // OK when `metadata` holds exactly one "authorization" entry of the form
  // "Bearer <token>" (scheme case-insensitive) with the configured token;
  // otherwise UNAUTHENTICATED saying what was missing or wrong (never the
  // token).
  absl::Status Check(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;

 private:
  std::string token_;
};

}  // namespace normsvc::server
