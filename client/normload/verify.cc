#include "verify.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "normsvc/client/tensor.h"
#include "normsvc/kernels/float16.h"

namespace normsvc::normload {
namespace {

struct Tolerance {
  double atol;
  double rtol;
};

Tolerance ForDType(v1::DType dtype) {
  switch (dtype) {
    case v1::FP16:
      return {1e-3, 2e-3};
    case v1::BF16:
      return {8e-3, 1.6e-2};
    default:
      return {1e-4, 1e-4};
  }
}

// Compares a response tensor with `want`; checks dtype and element count.
std::string Compare(const char* what, const v1::Tensor& got, v1::DType want_dtype,
                    const std::vector<float>& want, Tolerance tolerance) {
  if (got.dtype() != want_dtype) {
    return absl::StrCat(what, ": dtype ", got.dtype(), ", want ", want_dtype);
  }
  const int64_t size = client::DTypeSize(want_dtype);
  if (static_cast<int64_t>(got.data().size()) != static_cast<int64_t>(want.size()) * size) {
    return absl::StrCat(what, ": ", got.data().size(), " bytes, want ", want.size() * size);
  }
  const kernels::DType dtype = *client::ToKernelDType(want_dtype);
  for (size_t i = 0; i < want.size(); ++i) {
    const double value = kernels::LoadAsFloat(got.data().data(), dtype, static_cast<int64_t>(i));
    const double bound = tolerance.atol + tolerance.rtol * std::fabs(want[i]);
    if (!(std::fabs(value - want[i]) <= bound)) {
      return absl::StrCat(what, "[", i, "] = ", value, ", reference ", want[i], " (bound ", bound,
                          ")");
    }
  }
  return "";
}

}  // namespace

std::string CheckForwardResponse(const PreparedKind& kind, const Variant& variant,
                                 const v1::NormalizeResponse& response, bool echo) {
  if (echo) {
    if (response.output().data() != variant.forward.input().data()) {
      return "echo: output bytes differ from the input";
    }
    return "";
  }
  const RequestKind& k = kind.kind;
  const v1::DType out_dtype = k.out_dtype == v1::DTYPE_UNSPECIFIED ? k.dtype : k.out_dtype;
  std::string error =
      Compare("output", response.output(), out_dtype, variant.expected.output, ForDType(out_dtype));
  if (error.empty() && k.residual) {
    error = Compare("residual_sum", response.residual_sum(), k.dtype, variant.expected.residual_sum,
                    {0, 0});  // x + r rounded once: exact
  }
  if (error.empty() && k.statistics) {
    if (k.op == v1::LAYER_NORM) {
      error = Compare("mean", response.mean(), v1::FP32, variant.expected.mean, ForDType(v1::FP32));
    }
    if (error.empty()) {
      error = Compare("rstd", response.rstd(), v1::FP32, variant.expected.rstd, ForDType(v1::FP32));
    }
  }
  return error;
}

std::string CheckBackwardResponse(const PreparedKind& kind, const Variant& variant,
                                  const v1::NormalizeBackwardResponse& response) {
  const RequestKind& k = kind.kind;
  std::string error = Compare("grad_input", response.grad_input(), k.dtype, variant.expected.output,
                              ForDType(k.dtype));
  const Tolerance reduced{1e-3 * static_cast<double>(k.rows), 1e-3};
  if (error.empty()) {
    error = Compare("grad_gamma", response.grad_gamma(), v1::FP32, variant.expected.grad_gamma,
                    reduced);
  }
  if (error.empty() && k.op == v1::LAYER_NORM) {
    error =
        Compare("grad_beta", response.grad_beta(), v1::FP32, variant.expected.grad_beta, reduced);
  }
  return error;
}

}  // namespace normsvc::normload
