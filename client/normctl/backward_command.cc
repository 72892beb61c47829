// normctl backward: one NormalizeBackward call.
#include <cstdio>

#include "command.h"
#include "tensor_files.h"

namespace normsvc::normctl {
namespace {

// Saved statistics as read from a file, shaped for `input`: a 1-D input's
// are scalars (shape []), which `normalize --mean_out` writes as 0-d .npy
// files and ReadTensorFlag reads as shape [1] (it reads every 0-d array so,
// since an input needs a dimension); any other shape is left for the
// server to check.
v1::Tensor StatisticsFor(const v1::Tensor& input, v1::Tensor statistics) {
  if (input.shape_size() == 1 && statistics.shape_size() == 1 && statistics.shape(0) == 1) {
    statistics.clear_shape();
  }
  return statistics;
}

}  // namespace

int RunBackward(cli::Args& args, const Session& session) {
  v1::NormalizeBackwardRequest request;
  absl::StatusOr<v1::NormOp> op = OpFlag(args);
  if (!op.ok()) return LocalExitCode(op.status());
  request.set_op(*op);
  absl::StatusOr<std::optional<v1::DType>> dtype = DTypeFlag(args, "dtype");
  if (!dtype.ok()) return LocalExitCode(dtype.status());
  absl::StatusOr<double> eps = args.GetDouble("eps", 0.0);
  if (!eps.ok()) return LocalExitCode(eps.status());
  request.set_epsilon(static_cast<float>(*eps));
  const std::string dx_out = args.GetString("dx_out");
  const std::string dgamma_out = args.GetString("dgamma_out");
  const std::string dbeta_out = args.GetString("dbeta_out");
  if (!args.Has("in") || !args.Has("grad") || dx_out.empty()) {
    return LocalExitCode(
        absl::InvalidArgumentError("--in x.npy, --grad dy.npy and --dx_out dx.npy are required"));
  }
  if (*op == v1::RMS_NORM && (!dbeta_out.empty() || args.Has("mean"))) {
    return LocalExitCode(absl::InvalidArgumentError(
        "--dbeta_out and --mean are for layernorm (rmsnorm has neither)"));
  }
  if (absl::Status status =
          ParametersFromFlags(args, /*allow_beta=*/false, request.mutable_parameters());
      !status.ok()) {
    return LocalExitCode(status);
  }
  if (request.parameters().source_case() == v1::Parameters::SOURCE_NOT_SET) {
    request.clear_parameters();
  }
  absl::StatusOr<std::optional<v1::Tensor>> input = ReadTensorFlag(args, "in", *dtype);
  if (!input.ok()) return LocalExitCode(input.status());
  *request.mutable_input() = **std::move(input);
  absl::StatusOr<std::optional<v1::Tensor>> grad =
      ReadTensorFlag(args, "grad", request.input().dtype());
  if (!grad.ok()) return LocalExitCode(grad.status());
  *request.mutable_grad_output() = **std::move(grad);
  absl::StatusOr<std::optional<v1::Tensor>> mean = ReadTensorFlag(args, "mean", v1::FP32);
  if (!mean.ok()) return LocalExitCode(mean.status());
  if (*mean) *request.mutable_mean() = StatisticsFor(request.input(), **std::move(mean));
  absl::StatusOr<std::optional<v1::Tensor>> rstd = ReadTensorFlag(args, "rstd", v1::FP32);
  if (!rstd.ok()) return LocalExitCode(rstd.status());
  if (*rstd) *request.mutable_rstd() = StatisticsFor(request.input(), **std::move(rstd));
  if (absl::Status status = args.CheckAllUsed(); !status.ok()) return LocalExitCode(status);

  absl::StatusOr<v1::NormalizeBackwardResponse> response =
      session.client->NormalizeBackward(request, session.call);
  if (!response.ok()) return ReportRpcError(response.status());
  return WriteOutputFiles({{dx_out, response->has_grad_input(), response->grad_input()},
                           {dgamma_out, response->has_grad_gamma(), response->grad_gamma()},
                           {dbeta_out, response->has_grad_beta(), response->grad_beta()}});
}

}  // namespace normsvc::normctl
