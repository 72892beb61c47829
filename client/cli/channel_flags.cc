#include "channel_flags.h"

namespace normsvc::cli {

absl::StatusOr<client::ChannelOptions> ChannelOptionsFromArgs(Args& args, bool read_retries) {
  client::ChannelOptions options;
  options.target = args.GetString("target", client::DefaultTarget());
  options.load_balancing_policy = args.GetString("lb", "pick_first");
  if (read_retries) {
    absl::StatusOr<int64_t> retries = args.GetInt("retries", options.retry_max_attempts);
    if (!retries.ok()) return retries.status();
    options.retry_max_attempts = static_cast<int>(*retries);
  } else {
    options.retry_max_attempts = 1;
  }
  absl::StatusOr<int64_t> keepalive = args.GetInt("keepalive_ms", 0);
  if (!keepalive.ok()) return keepalive.status();
  options.keepalive_time_ms = static_cast<int>(*keepalive);
  absl::StatusOr<bool> tls = args.GetBool("tls", false);
  if (!tls.ok()) return tls.status();
  options.tls_ca_file = args.GetString("tls_ca_file");
  options.tls_cert_file = args.GetString("tls_cert_file");
  options.tls_key_file = args.GetString("tls_key_file");
  options.tls_server_name_override = args.GetString("tls_server_name");
  options.auth_token_file = args.GetString("auth_token_file");
  options.use_tls = *tls || !options.tls_ca_file.empty() || !options.tls_cert_file.empty() ||
                    !options.tls_key_file.empty();
  return options;
}

}  // namespace normsvc::cli
