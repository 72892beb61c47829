#include "server/auth.h"

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/secret_file.h"

namespace normsvc::server {
namespace {

constexpr char kAuthorization[] = "authorization";
constexpr absl::string_view kBearerPrefix = "Bearer ";

bool IsVisibleAscii(absl::string_view text) {
  for (const char c : text) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Every byte of `a` is visited whatever `b` holds; a length difference
  // only sets a bit. The volatile accumulator keeps the compiler from
  // turning the loop into an early-exit comparison.
  volatile uint8_t difference = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    const uint8_t other = i < b.size() ? static_cast<uint8_t>(b[i]) : 0;
    difference = difference | (static_cast<uint8_t>(a[i]) ^ other);
  }
  return difference == 0;
}

absl::StatusOr<BearerTokenAuth> BearerTokenAuth::FromFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFlagFile("auth_token_file", path, 64 << 10);
  if (!contents.ok()) return contents.status();
  std::string token = *std::move(contents);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--auth_token_file: '", path, "' is empty (it must hold the token)"));
  }
  if (!IsVisibleAscii(token)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--auth_token_file: the token in '", path,
                     "' must be one line of visible ASCII characters (no spaces)"));
  }
  return BearerTokenAuth(std::move(token));
}

absl::Status BearerTokenAuth::Check(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  const auto [first, last] = metadata.equal_range(kAuthorization);
  if (first == last) {
    return absl::UnauthenticatedError(
        "this server requires a bearer token: send the metadata 'authorization: Bearer <token>'");
  }
  if (std::next(first) != last) {
    return absl::UnauthenticatedError("more than one 'authorization' metadata entry");
  }
  const absl::string_view value(first->second.data(), first->second.size());
  if (value.size() < kBearerPrefix.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kBearerPrefix.size()), kBearerPrefix)) {
    return absl::UnauthenticatedError("the 'authorization' metadata must be 'Bearer <token>'");
  }
  if (!ConstantTimeEquals(token_, value.substr(kBearerPrefix.size()))) {
    return absl::UnauthenticatedError("invalid bearer token");
  }
  return absl::OkStatus();
}

}  // namespace normsvc::server
