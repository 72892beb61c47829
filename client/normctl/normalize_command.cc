// normctl normalize: one Normalize call (or a NormalizeStream of row chunks).
#include <algorithm>
#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
#include "command.h"
#include "normsvc/client/tensor.h"
#include "tensor_files.h"

namespace normsvc::normctl {
namespace {

struct Outputs {
  std::string out;
  std::string residual_sum_out;
  std::string mean_out;
  std::string rstd_out;
};

// Rows [first, first + count) of a tensor normalized over its last dim.
v1::Tensor SliceRows(const v1::Tensor& tensor, int64_t first, int64_t count, int64_t hidden) {
  v1::Tensor slice;
  slice.set_dtype(tensor.dtype());
  slice.add_shape(count);
  slice.add_shape(hidden);
  const int64_t row_bytes = hidden * client::DTypeSize(tensor.dtype());
  slice.set_data(tensor.data().substr(first * row_bytes, count * row_bytes));
  return slice;
}

// Concatenates chunk results (in request order) into one response whose
// tensors have the shapes of a single call on `input`.
absl::StatusOr<v1::NormalizeResponse> Reassemble(
    const v1::Tensor& input, std::map<uint64_t, v1::NormalizeResponse>& chunks) {
  v1::NormalizeResponse whole;
  auto append = [](const v1::Tensor& part, v1::Tensor* into) {
    into->set_dtype(part.dtype());
    into->mutable_data()->append(part.data());
  };
  for (auto& [id, chunk] : chunks) {
    append(chunk.output(), whole.mutable_output());
    if (chunk.has_residual_sum()) append(chunk.residual_sum(), whole.mutable_residual_sum());
    if (chunk.has_mean()) append(chunk.mean(), whole.mutable_mean());
    if (chunk.has_rstd()) append(chunk.rstd(), whole.mutable_rstd());
  }
  auto set_shape = [&](v1::Tensor* tensor, bool with_hidden) {
    tensor->clear_shape();
    const int dims = input.shape_size() - (with_hidden ? 0 : 1);
    for (int i = 0; i < dims; ++i) tensor->add_shape(input.shape(i));  // 1-D input: scalars
  };
  set_shape(whole.mutable_output(), true);
  if (whole.has_residual_sum()) set_shape(whole.mutable_residual_sum(), true);
  if (whole.has_mean()) set_shape(whole.mutable_mean(), false);
  if (whole.has_rstd()) set_shape(whole.mutable_rstd(), false);
  return whole;
}

absl::StatusOr<v1::NormalizeResponse> NormalizeOverStream(const v1::NormalizeRequest& request,
                                                          int64_t chunk_rows,
                                                          const Session& session) {
  absl::StatusOr<client::RowsAndHidden> dims = client::GetRowsAndHidden(request.input());
  if (!dims.ok()) return dims.status();
  std::vector<v1::NormalizeRequest> chunks;
  // No rows: one empty chunk, so the server still says what it returns.
  for (int64_t first = 0; first < std::max<int64_t>(dims->rows, 1); first += chunk_rows) {
    const int64_t count = std::min(chunk_rows, dims->rows - first);
    v1::NormalizeRequest& chunk = chunks.emplace_back(request);
    chunk.set_request_id(chunks.size() - 1);
    *chunk.mutable_input() = SliceRows(request.input(), first, count, dims->hidden);
    if (request.has_residual()) {
      *chunk.mutable_residual() = SliceRows(request.residual(), first, count, dims->hidden);
    }
  }
  absl::StatusOr<std::vector<v1::NormalizeStreamResponse>> responses =
      session.client->NormalizeStreamAll(chunks, session.call);
  if (!responses.ok()) return responses.status();
  std::map<uint64_t, v1::NormalizeResponse> by_id;
  for (v1::NormalizeStreamResponse& response : *responses) {
    if (response.has_error()) {
      return absl::Status(
          static_cast<absl::StatusCode>(response.error().code()),
          absl::StrCat("chunk ", response.request_id(), ": ", response.error().message()));
    }
    by_id[response.request_id()] = std::move(*response.mutable_response());
  }
  if (by_id.size() != chunks.size()) {
    return absl::InternalError(
        absl::StrCat("stream answered ", by_id.size(), " of ", chunks.size(), " chunks"));
  }
  return Reassemble(request.input(), by_id);
}

}  // namespace

int RunNormalize(cli::Args& args, const Session& session) {
  v1::NormalizeRequest request;
  absl::StatusOr<v1::NormOp> op = OpFlag(args);
  if (!op.ok()) return LocalExitCode(op.status());
  request.set_op(*op);
  absl::StatusOr<std::optional<v1::DType>> dtype = DTypeFlag(args, "dtype");
  if (!dtype.ok()) return LocalExitCode(dtype.status());
  absl::StatusOr<std::optional<v1::DType>> out_dtype = DTypeFlag(args, "out_dtype");
  if (!out_dtype.ok()) return LocalExitCode(out_dtype.status());
  if (*out_dtype) request.set_output_dtype(**out_dtype);
  absl::StatusOr<double> eps = args.GetDouble("eps", 0.0);
  if (!eps.ok()) return LocalExitCode(eps.status());
  request.set_epsilon(static_cast<float>(*eps));
  absl::StatusOr<bool> stream = args.GetBool("stream", false);
  absl::StatusOr<int64_t> chunk_rows = args.GetInt("chunk_rows", 1024);
  if (!stream.ok()) return LocalExitCode(stream.status());
  if (!chunk_rows.ok()) return LocalExitCode(chunk_rows.status());
  if (*chunk_rows < 1)
    return LocalExitCode(absl::InvalidArgumentError("--chunk_rows must be >= 1"));

  Outputs outputs;
  outputs.out = args.GetString("out");
  outputs.residual_sum_out = args.GetString("residual_sum_out");
  outputs.mean_out = args.GetString("mean_out");
  outputs.rstd_out = args.GetString("rstd_out");
  if (!args.Has("in") || outputs.out.empty()) {
    return LocalExitCode(absl::InvalidArgumentError("--in x.npy and --out y.npy are required"));
  }
  if (*op == v1::RMS_NORM && !outputs.mean_out.empty()) {
    return LocalExitCode(absl::InvalidArgumentError(
        "--mean_out is for layernorm (rmsnorm has no mean; --rstd_out works for both)"));
  }
  if (args.Has("chunk_rows") && !*stream) {
    return LocalExitCode(absl::InvalidArgumentError("--chunk_rows needs --stream"));
  }
  request.set_return_statistics(!outputs.mean_out.empty() || !outputs.rstd_out.empty());
  if (!outputs.residual_sum_out.empty()) {
    if (!args.Has("residual")) {
      return LocalExitCode(absl::InvalidArgumentError("--residual_sum_out needs --residual"));
    }
    request.set_return_residual_sum(true);
  }
  if (absl::Status status =
          ParametersFromFlags(args, /*allow_beta=*/true, request.mutable_parameters());
      !status.ok()) {
    return LocalExitCode(status);
  }
  if (request.parameters().source_case() == v1::Parameters::SOURCE_NOT_SET) {
    request.clear_parameters();
  }
  absl::StatusOr<std::optional<v1::Tensor>> input = ReadTensorFlag(args, "in", *dtype);
  if (!input.ok()) return LocalExitCode(input.status());
  *request.mutable_input() = **std::move(input);
  absl::StatusOr<std::optional<v1::Tensor>> residual =
      ReadTensorFlag(args, "residual", request.input().dtype());
  if (!residual.ok()) return LocalExitCode(residual.status());
  if (*residual) *request.mutable_residual() = **std::move(residual);
  if (absl::Status status = args.CheckAllUsed(); !status.ok()) return LocalExitCode(status);
  // The stream sends the residual's rows beside the input's, so its shape
  // must be the input's (one Normalize call leaves that check to the server).
  if (*stream && request.has_residual() &&
      !std::equal(request.residual().shape().begin(), request.residual().shape().end(),
                  request.input().shape().begin(), request.input().shape().end())) {
    return LocalExitCode(absl::InvalidArgumentError(
        absl::StrCat("--residual is ", DescribeTensor(request.residual()), " but --in is ",
                     DescribeTensor(request.input()), ": the shapes must be the same")));
  }

  absl::StatusOr<v1::NormalizeResponse> response =
      *stream ? NormalizeOverStream(request, *chunk_rows, session)
              : session.client->Normalize(request, session.call);
  if (!response.ok()) return ReportRpcError(response.status());
  return WriteOutputFiles(
      {{outputs.out, response->has_output(), response->output()},
       {outputs.residual_sum_out, response->has_residual_sum(), response->residual_sum()},
       {outputs.mean_out, response->has_mean(), response->mean()},
       {outputs.rstd_out, response->has_rstd(), response->rstd()}});
}

}  // namespace normsvc::normctl
