#include "tensor_files.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "command.h"
#include "normsvc/client/npy.h"
#include "normsvc/client/npy_tensor.h"
#include "normsvc/client/tensor.h"

namespace normsvc::normctl {

absl::StatusOr<std::optional<v1::Tensor>> ReadTensorFlag(cli::Args& args, const std::string& flag,
                                                         std::optional<v1::DType> convert_to) {
  std::optional<std::string> path = args.GetOptional(flag);
  if (!path) return std::optional<v1::Tensor>();
  absl::StatusOr<client::NpyArray> array = client::ReadNpyFile(*path);
  if (!array.ok()) {
    return absl::DataLossError(absl::StrCat("--", flag, ": ", array.status().message()));
  }
  absl::StatusOr<v1::Tensor> tensor = client::NpyToTensor(*array, convert_to);
  if (!tensor.ok()) {
    return absl::DataLossError(
        absl::StrCat("--", flag, " ", *path, ": ", tensor.status().message()));
  }
  return std::optional<v1::Tensor>(*std::move(tensor));
}

int WriteOutputFiles(std::initializer_list<OutputFile> files) {
  std::vector<client::NpyArray> arrays;
  for (const OutputFile& file : files) {
    if (file.path.empty()) continue;
    if (!file.present) {
      std::fprintf(stderr, "normctl: the server's reply has no tensor for %s\n", file.path.c_str());
      return kExitInternal;
    }
    absl::StatusOr<client::NpyArray> array = client::TensorToNpy(file.tensor);
    if (!array.ok()) {
      return LocalExitCode(absl::DataLossError(absl::StrCat(
          "server returned a malformed tensor for ", file.path, ": ", array.status().message())));
    }
    arrays.push_back(*std::move(array));
  }
  // Each file is written beside its place under a temporary name, and the
  // names are given only once every file is written: a write that fails
  // (no room, no such directory) leaves none of the outputs behind.
  std::vector<std::string> written;
  auto remove_written = [&written] {
    for (const std::string& path : written) std::remove(path.c_str());
  };
  size_t next = 0;
  for (const OutputFile& file : files) {
    if (file.path.empty()) continue;
    const std::string temporary = absl::StrCat(file.path, ".normctl-", getpid(), ".tmp");
    absl::Status status = client::WriteNpyFile(temporary, arrays[next++]);
    if (!status.ok()) {
      std::remove(temporary.c_str());
      remove_written();
      return LocalExitCode(absl::DataLossError(absl::StrCat(
          "cannot write ", file.path, " (", status.message(), "); no output was written")));
    }
    written.push_back(temporary);
  }
  next = 0;
  for (const OutputFile& file : files) {
    if (file.path.empty()) continue;
    if (std::rename(written[next].c_str(), file.path.c_str()) != 0) {
      const std::string error = std::strerror(errno);
      written.erase(written.begin(), written.begin() + static_cast<std::ptrdiff_t>(next));
      remove_written();
      return LocalExitCode(absl::DataLossError(
          absl::StrCat("cannot write ", file.path, ": ", error,
                       next == 0 ? "; no output was written" : "; the outputs before it were")));
    }
    ++next;
    std::printf("wrote %s: %s\n", file.path.c_str(), DescribeTensor(file.tensor).c_str());
  }
  return kExitOk;
}

absl::StatusOr<std::optional<v1::DType>> DTypeFlag(cli::Args& args, const std::string& flag) {
  std::optional<std::string> name = args.GetOptional(flag);
  if (!name) return std::optional<v1::DType>();
  std::optional<v1::DType> dtype = client::ParseDType(*name);
  if (!dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be fp32, fp16 or bf16, not '", *name, "'"));
  }
  return dtype;
}

absl::StatusOr<v1::NormOp> OpFlag(cli::Args& args) {
  std::optional<std::string> name = args.GetOptional("op");
  if (!name) return absl::InvalidArgumentError("--op layernorm|rmsnorm is required");
  std::optional<v1::NormOp> op = client::ParseNormOp(*name);
  if (!op) {
    return absl::InvalidArgumentError(
        absl::StrCat("--op must be layernorm or rmsnorm, not '", *name, "'"));
  }
  return *op;
}

absl::Status ParametersFromFlags(cli::Args& args, bool allow_beta, v1::Parameters* parameters) {
  std::optional<std::string> name = args.GetOptional("params");
  const bool has_inline = args.Has("gamma") || (allow_beta && args.Has("beta"));
  if (name && has_inline) {
    return absl::InvalidArgumentError("give either --params NAME or --gamma/--beta, not both");
  }
  if (name) {
    parameters->set_name(*name);
    return absl::OkStatus();
  }
  absl::StatusOr<std::optional<v1::Tensor>> gamma = ReadTensorFlag(args, "gamma", std::nullopt);
  if (!gamma.ok()) return gamma.status();
  if (*gamma) *parameters->mutable_inline_()->mutable_gamma() = **std::move(gamma);
  if (allow_beta) {
    absl::StatusOr<std::optional<v1::Tensor>> beta = ReadTensorFlag(args, "beta", std::nullopt);
    if (!beta.ok()) return beta.status();
    if (*beta) *parameters->mutable_inline_()->mutable_beta() = **std::move(beta);
  }
  return absl::OkStatus();
}

int LocalExitCode(const absl::Status& status) {
  std::fprintf(stderr, "normctl: %s\n", std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kDataLoss ? kExitFile : kExitUsage;
}

std::string DescribeTensor(const v1::Tensor& tensor) {
  return absl::StrCat(std::string(client::DTypeName(tensor.dtype())), " [",
                      absl::StrJoin(tensor.shape(), ", "), "]");
}

}  // namespace normsvc::normctl
