#include "verify.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

// Compares a response tensor with `want`: dtype, shape, then each element
// within atol + rtol |want| + scale[i] x kReductionTolerance (scale: per
// element, for sums over rows; empty: none).
constexpr double kReductionTolerance = 2e-4;

std::string Compare(const char* what, const v1::Tensor& got, v1::DType want_dtype,
                    const std::vector<int64_t>& want_shape, const std::vector<float>& want,
                    Tolerance tolerance, const std::vector<double>& scale = {}) {
  if (got.dtype() != want_dtype) {
    return absl::StrCat(what, ": dtype ", got.dtype(), ", want ", want_dtype);
  }
  if (!std::equal(got.shape().begin(), got.shape().end(), want_shape.begin(), want_shape.end())) {
    return absl::StrCat(what, ": shape [", absl::StrJoin(got.shape(), ", "), "], want [",
                        absl::StrJoin(want_shape, ", "), "]");
  }
  const int64_t size = client::DTypeSize(want_dtype);
  if (static_cast<int64_t>(got.data().size()) != static_cast<int64_t>(want.size()) * size) {
    return absl::StrCat(what, ": ", got.data().size(), " bytes, want ", want.size() * size);
  }
  const kernels::DType dtype = *client::ToKernelDType(want_dtype);
  for (size_t i = 0; i < want.size(); ++i) {
    const double value = kernels::LoadAsFloat(got.data().data(), dtype, static_cast<int64_t>(i));
    const double bound = tolerance.atol + tolerance.rtol * std::fabs(want[i]) +
                         (scale.empty() ? 0.0 : kReductionTolerance * scale[i]);
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
  const RequestKind& k = kind.kind;
  const std::vector<int64_t> matrix = {k.rows, k.hidden}, per_row = {k.rows};
  if (echo) {
    const v1::Tensor& input = variant.forward.input();
    if (response.output().dtype() != input.dtype() ||
        !std::equal(response.output().shape().begin(), response.output().shape().end(),
                    input.shape().begin(), input.shape().end())) {
      return "echo: output dtype or shape differs from the input";
    }
    if (response.output().data() != input.data()) {
      return "echo: output bytes differ from the input";
    }
    return "";
  }
  const v1::DType out_dtype = k.out_dtype == v1::DTYPE_UNSPECIFIED ? k.dtype : k.out_dtype;
  std::string error = Compare("output", response.output(), out_dtype, matrix,
                              variant.expected.output, ForDType(out_dtype));
  if (error.empty() && k.residual) {
    error = Compare("residual_sum", response.residual_sum(), k.dtype, matrix,
                    variant.expected.residual_sum, {0, 0});  // x + r rounded once: exact
  }
  if (error.empty() && k.statistics) {
    if (k.op == v1::LAYER_NORM) {
      error = Compare("mean", response.mean(), v1::FP32, per_row, variant.expected.mean,
                      ForDType(v1::FP32));
    }
    if (error.empty()) {
      error = Compare("rstd", response.rstd(), v1::FP32, per_row, variant.expected.rstd,
                      ForDType(v1::FP32));
    }
  }
  return error;
}

std::string CheckBackwardResponse(const PreparedKind& kind, const Variant& variant,
                                  const v1::NormalizeBackwardResponse& response) {
  const RequestKind& k = kind.kind;
  const std::vector<int64_t> matrix = {k.rows, k.hidden}, per_column = {k.hidden};
  std::string error = Compare("grad_input", response.grad_input(), k.dtype, matrix,
                              variant.expected.output, ForDType(k.dtype));
  // Sums over rows: bounded per column by the sum of the terms' magnitudes.
  const Tolerance reduced = ForDType(v1::FP32);
  if (error.empty()) {
    error = Compare("grad_gamma", response.grad_gamma(), v1::FP32, per_column,
                    variant.expected.grad_gamma, reduced, variant.expected.grad_gamma_scale);
  }
  if (error.empty() && k.op == v1::LAYER_NORM) {
    error = Compare("grad_beta", response.grad_beta(), v1::FP32, per_column,
                    variant.expected.grad_beta, reduced, variant.expected.grad_beta_scale);
  }
  return error;
}

}  // namespace normsvc::normload
