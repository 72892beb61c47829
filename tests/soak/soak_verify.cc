// VerifyForward and CodeName (soak_workload.h).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "normsvc/kernels/float16.h"
#include "soak_workload.h"

namespace normsvc::soak {
namespace {

kernels::DType FromProto(v1::DType dtype) {
  return dtype == v1::FP16   ? kernels::DType::kF16
         : dtype == v1::BF16 ? kernels::DType::kBF16
                             : kernels::DType::kF32;
}

// Relative to 1 + |expected|: the rounding of a result stored in `dtype`
// plus fp32 accumulation (the same bounds as the server's own tests).
double Tolerance(v1::DType dtype) {
  return dtype == v1::FP16 ? 2e-3 : dtype == v1::BF16 ? 1.6e-2 : 1e-4;
}

std::string Compare(const char* what, const v1::Tensor& got, v1::DType dtype,
                    const std::vector<double>& want, double tolerance) {
  if (want.empty()) {
    return got.data().empty() ? "" : absl::StrCat(what, ": present but not asked for");
  }
  if (got.dtype() != dtype) return absl::StrCat(what, ": dtype ", got.dtype(), ", want ", dtype);
  const int64_t size = dtype == v1::FP32 ? 4 : 2;
  if (static_cast<int64_t>(got.data().size()) != static_cast<int64_t>(want.size()) * size) {
    return absl::StrCat(what, ": ", got.data().size(), " bytes, want ", want.size() * size);
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const double value =
        kernels::LoadAsFloat(got.data().data(), FromProto(dtype), static_cast<int64_t>(i));
    const double bound = tolerance * (1.0 + std::fabs(want[i]));
    if (!(std::fabs(value - want[i]) <= bound)) {
      return absl::StrCat(what, "[", i, "] = ", value, ", reference ", want[i], " (bound ", bound,
                          ")");
    }
  }
  return "";
}

}  // namespace

std::string VerifyForward(const ValidRequest& expected, const v1::NormalizeResponse& response,
                          uint64_t request_id) {
  const v1::NormalizeRequest& request = expected.request;
  if (response.request_id() != request_id) {
    return absl::StrCat("request_id ", response.request_id(), ", want ", request_id);
  }
  const v1::Tensor& output = response.output();
  if (output.shape_size() != request.input().shape_size() ||
      !std::equal(output.shape().begin(), output.shape().end(), request.input().shape().begin())) {
    return "output: shape differs from the input's";
  }
  const v1::DType x_dtype = request.input().dtype();
  const v1::DType out_dtype =
      request.output_dtype() == v1::DTYPE_UNSPECIFIED ? x_dtype : request.output_dtype();
  std::string error = Compare("output", output, out_dtype, expected.output, Tolerance(out_dtype));
  if (error.empty()) {
    error = Compare("residual_sum", response.residual_sum(), x_dtype, expected.residual_sum,
                    Tolerance(x_dtype) / 4);
  }
  if (error.empty()) error = Compare("mean", response.mean(), v1::FP32, expected.mean, 1e-5);
  if (error.empty()) error = Compare("rstd", response.rstd(), v1::FP32, expected.rstd, 1e-4);
  return error.empty() ? "" : absl::StrCat(expected.description, ": ", error);
}

std::string CodeName(int code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  if (code >= 0 && code < 17) return kNames[code];
  return absl::StrCat("CODE_", code);
}

}  // namespace normsvc::soak
