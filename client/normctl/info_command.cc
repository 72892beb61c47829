// normctl info and normctl health.
#include <cstdio>

#include <google/protobuf/util/json_util.h>

#include "command.h"
#include "tensor_files.h"

namespace normsvc::normctl {
namespace {

// "title:  field_a=1 field_b=2" from a message of scalar fields.
void PrintFields(const char* title, const google::protobuf::Message& message) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  const google::protobuf::Descriptor* descriptor = message.GetDescriptor();
  std::string line;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    std::string value;
    if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_INT64) {
      value = std::to_string(reflection->GetInt64(message, field));
    } else if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_INT32) {
      value = std::to_string(reflection->GetInt32(message, field));
    } else {
      continue;
    }
    line += "\n  " + field->name() + " = " + value;
  }
  std::printf("%s:%s\n", title, line.c_str());
}

}  // namespace

int RunInfo(cli::Args& args, const Session& session) {
  absl::StatusOr<bool> json = args.GetBool("json", false);
  if (!json.ok()) return LocalExitCode(json.status());
  if (absl::Status status = args.CheckAllUsed(); !status.ok()) return LocalExitCode(status);
  absl::StatusOr<v1::GetServerInfoResponse> info = session.client->GetServerInfo(session.call);
  if (!info.ok()) return ReportRpcError(info.status());
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  if (*json) {
    (void)google::protobuf::util::MessageToJsonString(*info, &text, options);
    std::printf("%s", text.c_str());
    return kExitOk;
  }
  std::printf("version:    %s (%s)\n", info->version().c_str(), info->git_commit().c_str());
  std::printf("backend:    %s\n", info->backend().c_str());
  for (const auto& device : info->devices()) {
    std::printf("device %d:   %s, %.1f GiB, compute capability %s\n", device.index(),
                device.name().c_str(), device.memory_total_bytes() / double(1 << 30),
                device.compute_capability().c_str());
  }
  const v1::GetServerInfoResponse::Security& security = info->security();
  std::printf("security:   %s%s\n",
              !security.tls()                          ? "plaintext"
              : security.client_certificate_required() ? "mutual TLS"
                                                       : "TLS",
              security.bearer_token_required() ? ", bearer token required" : "");
  PrintFields("limits", info->limits());
  PrintFields("batching", info->batching());
  return kExitOk;
}

int RunHealth(cli::Args& args, const Session& session) {
  const std::string service = args.GetString("service");
  if (absl::Status status = args.CheckAllUsed(); !status.ok()) return LocalExitCode(status);
  absl::StatusOr<client::ServingStatus> health = session.client->CheckHealth(service, session.call);
  if (!health.ok() && health.status().code() == absl::StatusCode::kNotFound) {
    // grpc.health.v1: NOT_FOUND is the server's answer for a service it
    // does not know, the SERVICE_UNKNOWN of its Watch: answered, not serving.
    std::fprintf(stderr, "normctl: %s\n", std::string(health.status().message()).c_str());
    std::printf("SERVICE_UNKNOWN\n");
    return kExitNotServing;
  }
  if (!health.ok()) return ReportRpcError(health.status());
  std::printf("%s\n", client::ServingStatusName(*health));
  return *health == client::ServingStatus::kServing ? kExitOk : kExitNotServing;
}

}  // namespace normsvc::normctl
