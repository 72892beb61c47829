#include "soak_workload.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "normsvc/kernels/float16.h"
#include "normsvc/kernels/reference.h"

namespace normsvc::soak {
namespace {

using kernels::DType;

DType FromProto(v1::DType dtype) {
  return dtype == v1::FP16 ? DType::kF16 : dtype == v1::BF16 ? DType::kBF16 : DType::kF32;
}
int64_t Size(v1::DType dtype) { return dtype == v1::FP32 ? 4 : 2; }

// Random values representable in `dtype` (offset + scale * N(0, 1), never
// zero) as a tensor, and their exact decoded values.
v1::Tensor RandomTensor(std::mt19937_64& rng, v1::DType dtype, const std::vector<int64_t>& shape,
                        std::vector<double>* values, double offset = 0.5, double scale = 2.0) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  for (int64_t dim : shape) tensor.add_shape(dim);
  std::string* bytes = tensor.mutable_data();
  bytes->resize(count * Size(dtype));
  values->resize(count);
  std::normal_distribution<double> normal;
  for (int64_t i = 0; i < count; ++i) {
    double value = offset + scale * normal(rng);
    if (value == 0.0) value = 0.25;
    kernels::StoreFromDouble(bytes->data(), FromProto(dtype), i, value);
    (*values)[i] = kernels::LoadAsFloat(bytes->data(), FromProto(dtype), i);
  }
  return tensor;
}

double RoundTo(double value, DType dtype) {
  uint32_t scratch = 0;
  kernels::StoreFromDouble(&scratch, dtype, 0, value);
  return kernels::LoadAsFloat(&scratch, dtype, 0);
}

template <typename T>
T Pick(std::mt19937_64& rng, std::initializer_list<T> choices) {
  std::uniform_int_distribution<size_t> index(0, choices.size() - 1);
  return *(choices.begin() + index(rng));
}
bool Chance(std::mt19937_64& rng, double p) { return std::bernoulli_distribution(p)(rng); }

// Fills the expected values of `valid` from its request and parameters.
void ComputeExpected(ValidRequest& valid, const std::vector<double>& x,
                     const std::vector<double>& residual, const std::vector<double>& gamma,
                     const std::vector<double>& beta) {
  const v1::NormalizeRequest& request = valid.request;
  const auto& shape = request.input().shape();
  const int64_t hidden = shape.Get(shape.size() - 1);
  const int64_t rows = static_cast<int64_t>(x.size()) / hidden;
  const kernels::NormOp op =
      request.op() == v1::LAYER_NORM ? kernels::NormOp::kLayerNorm : kernels::NormOp::kRmsNorm;
  const double epsilon = request.epsilon() == 0 ? 1e-5f : request.epsilon();
  const DType x_dtype = FromProto(request.input().dtype());
  std::vector<double> v(hidden);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < hidden; ++i) {
      const int64_t k = r * hidden + i;
      // The contract normalizes x + residual rounded to the input dtype.
      v[i] = residual.empty() ? x[k] : RoundTo(x[k] + residual[k], x_dtype);
      if (request.return_residual_sum()) valid.residual_sum.push_back(v[i]);
    }
    const kernels::RowResult row =
        kernels::ReferenceForwardRow(op, v.data(), nullptr, gamma.empty() ? nullptr : gamma.data(),
                                     beta.empty() ? nullptr : beta.data(), hidden, epsilon);
    valid.output.insert(valid.output.end(), row.y.begin(), row.y.end());
    if (request.return_statistics()) {
      if (op == kernels::NormOp::kLayerNorm) valid.mean.push_back(row.mean);
      valid.rstd.push_back(row.rstd);
    }
  }
}

ValidRequest MakeValid(std::mt19937_64& rng, uint64_t id,
                       const std::vector<ParameterSetSpec>& sets) {
  ValidRequest valid;
  v1::NormalizeRequest& request = valid.request;
  request.set_request_id(id);
  request.set_op(Chance(rng, 0.5) ? v1::LAYER_NORM : v1::RMS_NORM);
  const v1::DType dtype = Pick(rng, {v1::FP32, v1::FP32, v1::FP16, v1::BF16});
  // Large enough that the server's work, not gRPC's per-call cost, bounds
  // its capacity (so that one client process can offer twice as much).
  int64_t hidden = Pick<int64_t>(rng, {256, 768, 1000, 1024, 2048, 4096, 8192});
  const int64_t rows = Pick<int64_t>(rng, {1, 4, 8, 16, 32, 64});
  // A registered set fixes H (and, with beta, the op).
  const ParameterSetSpec* set = nullptr;
  if (Chance(rng, 0.2)) {
    set = &sets[std::uniform_int_distribution<size_t>(0, sets.size() - 1)(rng)];
    hidden = set->request.gamma().shape(0);
    if (!set->beta.empty()) request.set_op(v1::LAYER_NORM);
  }
  std::vector<int64_t> shape = {rows, hidden};
  if (rows % 2 == 0 && Chance(rng, 0.3)) shape = {2, rows / 2, hidden};
  request.set_epsilon(Pick<float>(rng, {0.0f, 1e-5f, 1e-6f, 1e-3f}));
  std::vector<double> x, residual, gamma, beta;
  *request.mutable_input() = RandomTensor(rng, dtype, shape, &x);
  if (Chance(rng, 0.25)) {
    *request.mutable_residual() = RandomTensor(rng, dtype, shape, &residual, -0.2, 1.0);
    request.set_return_residual_sum(Chance(rng, 0.5));
  }
  request.set_return_statistics(Chance(rng, 0.25));
  if (Chance(rng, 0.2)) request.set_output_dtype(Pick(rng, {v1::FP32, v1::FP16, v1::BF16}));
  if (set != nullptr) {
    request.mutable_parameters()->set_name(set->request.name());
    gamma = set->gamma;
    beta = set->beta;
  } else if (Chance(rng, 0.5)) {
    const v1::DType param_dtype = Chance(rng, 0.5) ? v1::FP32 : dtype;
    auto* params = request.mutable_parameters()->mutable_inline_();
    *params->mutable_gamma() = RandomTensor(rng, param_dtype, {hidden}, &gamma, 1.0, 0.5);
    if (request.op() == v1::LAYER_NORM && Chance(rng, 0.5)) {
      *params->mutable_beta() = RandomTensor(rng, param_dtype, {hidden}, &beta, 0.0, 0.5);
    }
  }
  valid.description = absl::StrCat(request.op() == v1::LAYER_NORM ? "layernorm " : "rmsnorm ",
                                   dtype == v1::FP32   ? "fp32"
                                   : dtype == v1::FP16 ? "fp16"
                                                       : "bf16",
                                   " rows=", rows, " H=", hidden);
  ComputeExpected(valid, x, residual, gamma, beta);
  valid.bytes = static_cast<int64_t>(request.ByteSizeLong());
  return valid;
}

ParameterSetSpec MakeSet(std::mt19937_64& rng, const std::string& name, int64_t hidden,
                         bool with_beta) {
  ParameterSetSpec set;
  set.request.set_name(name);
  set.request.set_replace(true);
  *set.request.mutable_gamma() = RandomTensor(rng, v1::FP32, {hidden}, &set.gamma, 1.0, 0.5);
  if (with_beta) {
    *set.request.mutable_beta() = RandomTensor(rng, v1::FP32, {hidden}, &set.beta, 0.0, 0.5);
  }
  return set;
}

// Small requests that break one rule each.
std::vector<InvalidRequest> MakeMalformed(std::mt19937_64& rng) {
  std::vector<double> scratch;
  v1::NormalizeRequest base;
  base.set_request_id(1);
  base.set_op(v1::LAYER_NORM);
  *base.mutable_input() = RandomTensor(rng, v1::FP32, {2, 64}, &scratch);
  const v1::Tensor gamma64 = RandomTensor(rng, v1::FP32, {64}, &scratch);
  std::vector<InvalidRequest> out;
  const auto add = [&](const char* what, grpc::StatusCode code, auto&& change) {
    InvalidRequest bad{base, code, what};
    change(bad.request);
    out.push_back(std::move(bad));
  };
  const grpc::StatusCode invalid = grpc::StatusCode::INVALID_ARGUMENT;
  add("data shorter than the shape", invalid,
      [](auto& r) { r.mutable_input()->mutable_data()->resize(2 * 64 * 4 - 4); });
  add("epsilon < 0", invalid, [](auto& r) { r.set_epsilon(-1.0f); });
  add("epsilon NaN", invalid,
      [](auto& r) { r.set_epsilon(std::numeric_limits<float>::quiet_NaN()); });
  add("epsilon inf", invalid,
      [](auto& r) { r.set_epsilon(std::numeric_limits<float>::infinity()); });
  add("op unset", invalid, [](auto& r) { r.set_op(v1::NORM_OP_UNSPECIFIED); });
  add("op out of range", invalid, [](auto& r) { r.set_op(static_cast<v1::NormOp>(7)); });
  add("dtype unset", invalid, [](auto& r) { r.mutable_input()->set_dtype(v1::DTYPE_UNSPECIFIED); });
  add("no input", invalid, [](auto& r) { r.clear_input(); });
  add("empty shape", invalid, [](auto& r) { r.mutable_input()->clear_shape(); });
  add("negative dimension", invalid, [](auto& r) { r.mutable_input()->set_shape(0, -2); });
  add("hidden size 0", invalid, [](auto& r) { r.mutable_input()->set_shape(1, 0); });
  add("gamma of the wrong length", invalid, [&](auto& r) {
    *r.mutable_parameters()->mutable_inline_()->mutable_gamma() = gamma64;
    r.mutable_parameters()->mutable_inline_()->mutable_gamma()->set_shape(0, 63);
  });
  add("RMS_NORM with an inline beta", invalid, [&](auto& r) {
    r.set_op(v1::RMS_NORM);
    *r.mutable_parameters()->mutable_inline_()->mutable_beta() = gamma64;
  });
  add("beta dtype differs from gamma's", invalid, [&](auto& r) {
    auto* params = r.mutable_parameters()->mutable_inline_();
    *params->mutable_gamma() = gamma64;
    *params->mutable_beta() = gamma64;
    params->mutable_beta()->set_dtype(v1::FP16);
    params->mutable_beta()->mutable_data()->resize(64 * 2);
  });
  add("residual of another shape", invalid, [](auto& r) {
    *r.mutable_residual() = r.input();
    r.mutable_residual()->set_shape(0, 1);
  });
  add("residual of another dtype", invalid, [](auto& r) {
    *r.mutable_residual() = r.input();
    r.mutable_residual()->set_dtype(v1::FP16);
  });
  add("return_residual_sum without residual", invalid,
      [](auto& r) { r.set_return_residual_sum(true); });
  add("output_dtype out of range", invalid,
      [](auto& r) { r.set_output_dtype(static_cast<v1::DType>(9)); });
  add("unknown parameter set", grpc::StatusCode::NOT_FOUND,
      [](auto& r) { r.mutable_parameters()->set_name("soak-no-such-set"); });
  add("parameter set of another hidden size", grpc::StatusCode::FAILED_PRECONDITION,
      [](auto& r) { r.mutable_parameters()->set_name("soak-ln-4096"); });
  add("RMS_NORM with a set that has beta", grpc::StatusCode::FAILED_PRECONDITION, [&](auto& r) {
    r.set_op(v1::RMS_NORM);
    *r.mutable_input() = RandomTensor(rng, v1::FP32, {1, 4096}, &scratch);
    r.mutable_parameters()->set_name("soak-ln-4096");
  });
  return out;
}

// Past a limit; all but the first are tiny messages that claim huge sizes.
std::vector<InvalidRequest> MakeOversized(std::mt19937_64& rng, const SoakLimits& limits) {
  std::vector<double> scratch;
  const grpc::StatusCode invalid = grpc::StatusCode::INVALID_ARGUMENT;
  std::vector<InvalidRequest> out;
  const auto claim = [&](const char* what, std::vector<int64_t> shape, int data_bytes) {
    InvalidRequest bad{{}, invalid, what};
    bad.request.set_op(v1::LAYER_NORM);
    bad.request.mutable_input()->set_dtype(v1::FP32);
    for (int64_t dim : shape) bad.request.mutable_input()->add_shape(dim);
    bad.request.mutable_input()->mutable_data()->assign(data_bytes, '\x3f');
    out.push_back(std::move(bad));
  };
  InvalidRequest wide{{}, invalid, "hidden size past --max_hidden_size (real data)"};
  wide.request.set_op(v1::RMS_NORM);
  *wide.request.mutable_input() =
      RandomTensor(rng, v1::FP32, {1, limits.max_hidden_size + 1}, &scratch);
  out.push_back(std::move(wide));
  claim("2^60 rows in 20 bytes", {int64_t{1} << 40, int64_t{1} << 20, 8}, 20);
  claim("rows past --max_request_rows in 20 bytes", {limits.max_request_rows + 1, 1}, 20);
  claim("bytes past --max_request_bytes in 20 bytes",
        {limits.max_request_rows, limits.max_hidden_size}, 20);
  claim("int64 overflow of the shape product",
        {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max(), 4}, 20);
  return out;
}

}  // namespace

Workload BuildWorkload(uint64_t seed, const SoakLimits& limits, int valid_count) {
  std::mt19937_64 rng(seed);
  Workload workload;
  workload.parameter_sets.push_back(MakeSet(rng, "soak-ln-4096", 4096, true));
  workload.parameter_sets.push_back(MakeSet(rng, "soak-rms-1024", 1024, false));
  for (int i = 0; i < valid_count; ++i) {
    workload.valid.push_back(MakeValid(rng, 1000 + i, workload.parameter_sets));
  }
  workload.malformed = MakeMalformed(rng);
  workload.oversized = MakeOversized(rng, limits);
  std::vector<double> scratch;
  const int64_t hidden = limits.max_hidden_size;
  InvalidRequest big{{}, grpc::StatusCode::INVALID_ARGUMENT, "real data past --max_request_bytes"};
  big.request.set_op(v1::LAYER_NORM);
  *big.request.mutable_input() =
      RandomTensor(rng, v1::FP32, {limits.max_request_bytes / (hidden * 4) + 1, hidden}, &scratch);
  workload.huge.push_back(std::move(big));
  // gRPC refuses a message past the server's receive limit before normsvc sees it.
  InvalidRequest message{
      {}, grpc::StatusCode::RESOURCE_EXHAUSTED, "message past --max_receive_message_bytes"};
  message.request.set_op(v1::LAYER_NORM);
  message.request.mutable_input()->set_dtype(v1::FP32);
  message.request.mutable_input()->add_shape(limits.max_receive_message_bytes / (hidden * 4) + 1);
  message.request.mutable_input()->add_shape(hidden);
  message.request.mutable_input()->mutable_data()->assign(
      (limits.max_receive_message_bytes / (hidden * 4) + 1) * hidden * 4, '\x3f');
  workload.huge.push_back(std::move(message));
  return workload;
}

}  // namespace normsvc::soak
