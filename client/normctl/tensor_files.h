// Reading and writing the .npy files named by normctl's flags.
//
// Error convention: file problems come back as kDataLoss (exit code 3),
// flag problems as kInvalidArgument (exit code 2); LocalExitCode maps them.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "args.h"
#include "normsvc/v1/normalizer.pb.h"

namespace normsvc::normctl {

// The tensor in the file named by --`flag`, re-encoded to `convert_to` when
// given; nullopt when the flag is absent. Errors name the flag and file.
absl::StatusOr<std::optional<v1::Tensor>> ReadTensorFlag(cli::Args& args, const std::string& flag,
                                                         std::optional<v1::DType> convert_to);

// Writes the response tensors asked for (empty path: not asked), after
// checking that every one of them is present and well formed; each goes to
// a temporary file beside its path first, renamed once all are written, so
// a failure leaves none of the outputs behind. Prints "wrote PATH: ..." per
// file; returns the exit code.
struct OutputFile {
  const std::string& path;
  bool present;
  const v1::Tensor& tensor;
};
int WriteOutputFiles(std::initializer_list<OutputFile> files);

// --`flag` as a dtype (nullopt when absent); error on an unknown name.
absl::StatusOr<std::optional<v1::DType>> DTypeFlag(cli::Args& args, const std::string& flag);
// --op, required.
absl::StatusOr<v1::NormOp> OpFlag(cli::Args& args);

// Inline --gamma/--beta or --params NAME into `parameters` (left empty when
// none is given). Gamma and beta keep their file dtype unless it is float64
// (sent as fp32). Returns a usage error when both forms are given.
absl::Status ParametersFromFlags(cli::Args& args, bool allow_beta, v1::Parameters* parameters);

// Prints the error and returns kExitFile or kExitUsage by the convention above.
int LocalExitCode(const absl::Status& status);

// "fp32 [8, 4096]".
std::string DescribeTensor(const v1::Tensor& tensor);

}  // namespace normsvc::normctl
