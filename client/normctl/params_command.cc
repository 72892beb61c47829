// normctl params register|delete|list.
#include <cstdio>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "command.h"
#include "normsvc/client/tensor.h"
#include "tensor_files.h"

namespace normsvc::normctl {
namespace {

void PrintSet(const v1::ParameterSetInfo& info) {
  std::printf("%-32s %8lld  %-5s %-5s %-5s %12lld\n", info.name().c_str(),
              static_cast<long long>(info.hidden_size()),
              std::string(client::DTypeName(info.dtype())).c_str(), info.has_gamma() ? "yes" : "no",
              info.has_beta() ? "yes" : "no", static_cast<long long>(info.bytes()));
}

void PrintHeader() {
  std::printf("%-32s %8s  %-5s %-5s %-5s %12s\n", "NAME", "H", "DTYPE", "GAMMA", "BETA", "BYTES");
}

int Register(cli::Args& args, const Session& session) {
  v1::RegisterParametersRequest request;
  request.set_name(args.GetString("name"));
  if (request.name().empty()) {
    return LocalExitCode(absl::InvalidArgumentError("--name NAME is required"));
  }
  absl::StatusOr<bool> replace = args.GetBool("replace", false);
  if (!replace.ok()) return LocalExitCode(replace.status());
  request.set_replace(*replace);
  absl::StatusOr<std::optional<v1::DType>> dtype = DTypeFlag(args, "dtype");
  if (!dtype.ok()) return LocalExitCode(dtype.status());
  absl::StatusOr<std::optional<v1::Tensor>> gamma = ReadTensorFlag(args, "gamma", *dtype);
  if (!gamma.ok()) return LocalExitCode(gamma.status());
  if (*gamma) *request.mutable_gamma() = **std::move(gamma);
  absl::StatusOr<std::optional<v1::Tensor>> beta = ReadTensorFlag(args, "beta", *dtype);
  if (!beta.ok()) return LocalExitCode(beta.status());
  if (*beta) *request.mutable_beta() = **std::move(beta);
  if (absl::Status status = args.CheckAllUsed(); !status.ok()) return LocalExitCode(status);
  absl::StatusOr<v1::RegisterParametersResponse> response =
      session.client->RegisterParameters(request, session.call);
  if (!response.ok()) return ReportRpcError(response.status());
  PrintHeader();
  PrintSet(response->info());
  return kExitOk;
}

int Delete(cli::Args& args, const Session& session) {
  const std::string name = args.GetString("name");
  if (name.empty()) return LocalExitCode(absl::InvalidArgumentError("--name NAME is required"));
  if (absl::Status status = args.CheckAllUsed(); !status.ok()) return LocalExitCode(status);
  if (absl::Status status = session.client->DeleteParameters(name, session.call); !status.ok()) {
    return ReportRpcError(status);
  }
  std::printf("deleted %s\n", name.c_str());
  return kExitOk;
}

int List(cli::Args& args, const Session& session) {
  absl::StatusOr<bool> json = args.GetBool("json", false);
  if (!json.ok()) return LocalExitCode(json.status());
  if (absl::Status status = args.CheckAllUsed(); !status.ok()) return LocalExitCode(status);
  absl::StatusOr<v1::ListParametersResponse> response =
      session.client->ListParameters(session.call);
  if (!response.ok()) return ReportRpcError(response.status());
  if (*json) {
    std::string text;
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    (void)google::protobuf::util::MessageToJsonString(*response, &text, options);
    std::printf("%s", text.c_str());
    return kExitOk;
  }
  PrintHeader();
  for (const v1::ParameterSetInfo& info : response->parameter_sets()) PrintSet(info);
  return kExitOk;
}

}  // namespace

int RunParams(cli::Args& args, const Session& session) {
  if (args.positional().size() != 1) {
    return LocalExitCode(absl::InvalidArgumentError("usage: normctl params register|delete|list"));
  }
  const std::string& verb = args.positional()[0];
  if (verb == "register") return Register(args, session);
  if (verb == "delete") return Delete(args, session);
  if (verb == "list") return List(args, session);
  return LocalExitCode(absl::InvalidArgumentError(
      absl::StrCat("unknown params command '", verb, "' (register, delete or list)")));
}

}  // namespace normsvc::normctl
