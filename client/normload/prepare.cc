// Builds the request variants of each kind and, when verifying, the CPU
// reference's answer to each (PrepareWorkload in workload.h).
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "normsvc/client/tensor.h"
#include "normsvc/kernels/float16.h"
#include "normsvc/kernels/reference.h"
#include "workload.h"

namespace normsvc::normload {
namespace {

v1::Tensor RandomTensor(v1::DType dtype, std::vector<int64_t> shape, double mean, double stddev,
                        std::mt19937_64& rng) {
  std::normal_distribution<float> normal(static_cast<float>(mean), static_cast<float>(stddev));
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  std::vector<float> values(count);
  for (float& value : values) value = normal(rng);
  return *client::MakeTensorFromFloats(dtype, shape, values);
}

std::vector<float> Decode(const std::string& bytes, v1::DType dtype) {
  const kernels::DType kernel_dtype = *client::ToKernelDType(dtype);
  const int64_t count = static_cast<int64_t>(bytes.size()) / client::DTypeSize(dtype);
  std::vector<float> values(count);
  for (int64_t i = 0; i < count; ++i)
    values[i] = kernels::LoadAsFloat(bytes.data(), kernel_dtype, i);
  return values;
}

absl::Status ExpectForward(const RequestKind& kind, const v1::NormalizeRequest& request,
                           const v1::Tensor* gamma, const v1::Tensor* beta, Expected* expected) {
  const v1::DType out_dtype = kind.out_dtype == v1::DTYPE_UNSPECIFIED ? kind.dtype : kind.out_dtype;
  std::string out(kind.rows * kind.hidden * client::DTypeSize(out_dtype), '\0');
  std::string sum(kind.residual ? request.input().data().size() : 0, '\0');
  std::vector<float> mean(kind.rows), rstd(kind.rows);
  kernels::ForwardSegment segment;
  segment.op = *client::ToKernelOp(kind.op);
  segment.rows = kind.rows;
  segment.hidden = kind.hidden;
  segment.epsilon = kind.epsilon;
  segment.x_dtype = *client::ToKernelDType(kind.dtype);
  segment.out_dtype = *client::ToKernelDType(out_dtype);
  segment.x = request.input().data().data();
  segment.x_row_stride = kind.hidden;
  if (kind.residual) {
    segment.residual = request.residual().data().data();
    segment.residual_row_stride = kind.hidden;
    segment.residual_out = sum.data();
    segment.residual_out_row_stride = kind.hidden;
  }
  if (gamma != nullptr) {
    segment.param_dtype = *client::ToKernelDType(gamma->dtype());
    segment.gamma = gamma->data().data();
  }
  if (beta != nullptr) segment.beta = beta->data().data();
  segment.out = out.data();
  segment.out_row_stride = kind.hidden;
  if (kind.statistics) {
    if (kind.op == v1::LAYER_NORM) segment.mean = mean.data();
    segment.rstd = rstd.data();
  }
  kernels::Status status = kernels::ReferenceForward(&segment, 1, {.max_threads = 1});
  if (!status.ok()) return absl::InvalidArgumentError(status.message());
  expected->output = Decode(out, out_dtype);
  if (kind.residual) expected->residual_sum = Decode(sum, kind.dtype);
  if (kind.statistics) {
    if (kind.op == v1::LAYER_NORM) expected->mean = mean;
    expected->rstd = rstd;
  }
  return absl::OkStatus();
}

absl::Status ExpectBackward(const RequestKind& kind, const v1::NormalizeBackwardRequest& request,
                            const v1::Tensor* gamma, Expected* expected) {
  std::string dx(request.input().data().size(), '\0');
  std::vector<float> dgamma(kind.hidden), dbeta(kind.hidden);
  kernels::BackwardArgs args;
  args.op = *client::ToKernelOp(kind.op);
  args.rows = kind.rows;
  args.hidden = kind.hidden;
  args.epsilon = kind.epsilon;
  args.x_dtype = *client::ToKernelDType(kind.dtype);
  args.x = request.input().data().data();
  args.x_row_stride = kind.hidden;
  args.dy = request.grad_output().data().data();
  args.dy_row_stride = kind.hidden;
  if (gamma != nullptr) {
    args.param_dtype = *client::ToKernelDType(gamma->dtype());
    args.gamma = gamma->data().data();
  }
  args.dx = dx.data();
  args.dx_row_stride = kind.hidden;
  args.dgamma = dgamma.data();
  if (kind.op == v1::LAYER_NORM) args.dbeta = dbeta.data();
  kernels::Status status = kernels::ReferenceBackward(args, {.max_threads = 1});
  if (!status.ok()) return absl::InvalidArgumentError(status.message());
  expected->output = Decode(dx, kind.dtype);
  expected->grad_gamma = dgamma;
  if (kind.op == v1::LAYER_NORM) expected->grad_beta = dbeta;
  // The scales of the reductions, from the inputs as sent, in double.
  const std::vector<float> x = Decode(request.input().data(), kind.dtype);
  const std::vector<float> dy = Decode(request.grad_output().data(), kind.dtype);
  expected->grad_gamma_scale.assign(kind.hidden, 0.0);
  expected->grad_beta_scale.assign(kind.hidden, 0.0);
  for (int64_t row = 0; row < kind.rows; ++row) {
    const float* xr = &x[row * kind.hidden];
    const float* dyr = &dy[row * kind.hidden];
    double mean = 0, square = 0;
    if (kind.op == v1::LAYER_NORM) {
      for (int64_t i = 0; i < kind.hidden; ++i) mean += xr[i];
      mean /= static_cast<double>(kind.hidden);
    }
    for (int64_t i = 0; i < kind.hidden; ++i) square += (xr[i] - mean) * (xr[i] - mean);
    const double rstd = 1.0 / std::sqrt(square / static_cast<double>(kind.hidden) + kind.epsilon);
    for (int64_t i = 0; i < kind.hidden; ++i) {
      expected->grad_gamma_scale[i] += std::fabs(dyr[i] * (xr[i] - mean) * rstd);
      expected->grad_beta_scale[i] += std::fabs(dyr[i]);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<PreparedKind>> PrepareWorkload(const std::vector<RequestKind>& kinds,
                                                          const WorkloadOptions& options) {
  std::mt19937_64 rng(options.seed);
  std::vector<PreparedKind> prepared;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const RequestKind& kind = kinds[k];
    if (options.echo && kind.method == Method::kBackward) {
      return absl::InvalidArgumentError("the echo server answers Normalize only (no backward)");
    }
    PreparedKind& entry = prepared.emplace_back();
    entry.kind = kind;
    const v1::DType param_dtype =
        kind.param_dtype == v1::DTYPE_UNSPECIFIED ? kind.dtype : kind.param_dtype;
    // Parameters are shared by a kind's variants.
    v1::Parameters parameters;
    std::optional<v1::Tensor> gamma, beta;
    if (kind.params != ParamsMode::kNone) {
      gamma = RandomTensor(param_dtype, {kind.hidden}, 1.0, 0.25, rng);
      if (kind.op == v1::LAYER_NORM && kind.method == Method::kForward) {
        beta = RandomTensor(param_dtype, {kind.hidden}, 0.0, 0.25, rng);
      }
    }
    if (kind.params == ParamsMode::kInline) {
      *parameters.mutable_inline_()->mutable_gamma() = *gamma;
      if (beta) *parameters.mutable_inline_()->mutable_beta() = *beta;
    } else if (kind.params == ParamsMode::kRegistered) {
      entry.registered_name = absl::StrCat(options.name_prefix, "-", k);
      entry.registration.set_name(entry.registered_name);
      entry.registration.set_replace(true);
      *entry.registration.mutable_gamma() = *gamma;
      if (beta) *entry.registration.mutable_beta() = *beta;
      parameters.set_name(entry.registered_name);
    }
    const std::vector<int64_t> shape = {kind.rows, kind.hidden};
    for (int v = 0; v < options.variants; ++v) {
      Variant& variant = entry.variants.emplace_back();
      if (kind.method == Method::kForward) {
        v1::NormalizeRequest& request = variant.forward;
        request.set_op(kind.op);
        request.set_epsilon(kind.epsilon);
        *request.mutable_input() = RandomTensor(kind.dtype, shape, 0.5, 1.5, rng);
        if (kind.residual) {
          *request.mutable_residual() = RandomTensor(kind.dtype, shape, 0.0, 0.5, rng);
          request.set_return_residual_sum(true);
        }
        request.set_return_statistics(kind.statistics);
        if (kind.out_dtype != v1::DTYPE_UNSPECIFIED) request.set_output_dtype(kind.out_dtype);
        if (kind.params != ParamsMode::kNone) *request.mutable_parameters() = parameters;
        variant.request_bytes = request.input().data().size() + request.residual().data().size() +
                                parameters.inline_().gamma().data().size() +
                                parameters.inline_().beta().data().size();
        if (options.verify && !options.echo) {
          absl::Status status = ExpectForward(kind, request, gamma ? &*gamma : nullptr,
                                              beta ? &*beta : nullptr, &variant.expected);
          if (!status.ok()) return status;
        }
      } else {
        v1::NormalizeBackwardRequest& request = variant.backward;
        request.set_op(kind.op);
        request.set_epsilon(kind.epsilon);
        *request.mutable_input() = RandomTensor(kind.dtype, shape, 0.5, 1.5, rng);
        *request.mutable_grad_output() = RandomTensor(kind.dtype, shape, 0.0, 1.0, rng);
        if (kind.params != ParamsMode::kNone) *request.mutable_parameters() = parameters;
        variant.request_bytes = request.input().data().size() +
                                request.grad_output().data().size() +
                                parameters.inline_().gamma().data().size();
        if (options.verify) {
          absl::Status status =
              ExpectBackward(kind, request, gamma ? &*gamma : nullptr, &variant.expected);
          if (!status.ok()) return status;
        }
      }
    }
  }
  return prepared;
}

}  // namespace normsvc::normload
