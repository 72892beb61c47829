// libFuzzer target: untrusted bytes -> a normsvc.v1 request -> the server's
// edge validation, as the RPC handlers run it.
//
// Input: the first byte picks the message (0: NormalizeRequest,
// 1: NormalizeBackwardRequest, 2: RegisterParametersRequest; taken mod 3)
// and the limits (small ones, or the server's defaults), the rest is the
// message's wire encoding. Besides crashes and sanitizer reports, the
// target checks the validation contract: whatever passes is a plan whose
// views lie inside the request and whose sizes agree with shape and dtype
// (every byte of every view is read, so ASan sees a view that overruns).
// The bytes of every message also go through its call's own parser
// (received_request.h), cut into slices at points the bytes choose: it must
// accept exactly what protobuf accepts, give the same fields (for backward
// and register requests once their data is copied into the message), and
// validation must answer the same for both.
//
// Seed corpus: NORMSVC_FUZZ_WRITE_SEEDS=<dir> ./fuzz_requests writes valid
// requests of every kind into <dir> and exits.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_contract.h"
#include "normsvc/v1/normalizer.pb.h"
#include "server/parameter_store.h"
#include "server/received_request.h"
#include "server/validation.h"
#include "server_fixture.h"

namespace {

namespace v1 = ::normsvc::v1;
namespace kernels = ::normsvc::kernels;
using normsvc::fuzz::Report;
using normsvc::fuzz::Require;
using normsvc::fuzz::WriteSeed;
using normsvc::server::BackwardPlan;
using normsvc::server::ForwardPlan;
using normsvc::server::ParameterLimits;
using normsvc::server::ParameterStore;
using normsvc::server::ParameterViews;
using normsvc::server::RegisterPlan;
using normsvc::server::RequestLimits;
using Fixture = normsvc::fuzz::ServerFixture;
using normsvc::server::TensorView;

// Reads every byte of [data, data + bytes) so that ASan reports a view that
// reaches past what the request holds.
void TouchBytes(const void* data, int64_t bytes) {
  Require(bytes >= 0, "negative view size");
  if (bytes == 0) return;
  Require(data != nullptr, "null view with a nonzero size");
  const volatile unsigned char* p = static_cast<const unsigned char*>(data);
  unsigned sum = 0;
  for (int64_t i = 0; i < bytes; ++i) sum += p[i];
  (void)sum;
}

int64_t Size(kernels::DType dtype) { return static_cast<int64_t>(kernels::DTypeSize(dtype)); }

void CheckInput(const TensorView& input) {
  Require(input.rows >= 0 && input.hidden >= 1, "input dimensions");
  Require(input.bytes == input.rows * input.hidden * Size(input.dtype), "input bytes");
  TouchBytes(input.data, input.bytes);
}

void CheckParameters(const ParameterViews& params, const TensorView& input) {
  if (params.set != nullptr) {
    Require(params.set->hidden == input.hidden, "registered set hidden size");
    Require(params.gamma == nullptr && params.beta == nullptr, "inline views with a set");
    return;
  }
  const int64_t bytes = input.hidden * Size(params.dtype);
  int64_t inline_bytes = 0;
  if (params.gamma != nullptr) {
    TouchBytes(params.gamma, bytes);
    inline_bytes += bytes;
  }
  if (params.beta != nullptr) {
    TouchBytes(params.beta, bytes);
    inline_bytes += bytes;
  }
  Require(params.inline_bytes == inline_bytes, "inline parameter bytes");
}

// A received tensor's data against the bytes protobuf parsed for it.
void RequireSameData(const normsvc::server::ReceivedBytes& received, const std::string& expected) {
  std::string flat(static_cast<size_t>(received.size()), '\0');
  received.CopyTo(0, received.size(), flat.data());
  Require(flat == expected, "received tensor data differs from protobuf's");
}

// The bytes as gRPC might deliver them: slices of growing, input-chosen sizes.
grpc::ByteBuffer InputSliced(const uint8_t* data, size_t size) {
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  size_t step = 1;
  while (at < size) {
    const size_t n = std::min(step, size - at);
    slices.emplace_back(data + at, n);
    step = step * 3 + (data[at] & 7);
    at += n;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// The unary call's parser on the same bytes, against protobuf's parse
// (`request`, or none) and the validation of it (`plan`).
void CompareReceivedParse(const uint8_t* data, size_t size, const v1::NormalizeRequest* request,
                          const Fixture& f, const RequestLimits& limits,
                          const absl::StatusOr<ForwardPlan>* plan) {
  grpc::ByteBuffer buffer = InputSliced(data, size);
  normsvc::server::ReceivedNormalizeRequest received;
  const bool parsed = normsvc::server::ParseReceivedNormalizeRequest(&buffer, &received).ok();
  Require(parsed == (request != nullptr), "received parse and protobuf disagree on the bytes");
  if (!parsed) return;
  v1::NormalizeRequest without_data = *request;
  const v1::Parameters::Inline& inline_parameters = request->parameters().inline_();
  RequireSameData(received.input, request->input().data());
  RequireSameData(received.residual, request->residual().data());
  RequireSameData(received.gamma, inline_parameters.gamma().data());
  RequireSameData(received.beta, inline_parameters.beta().data());
  if (without_data.has_input()) without_data.mutable_input()->clear_data();
  if (without_data.has_residual()) without_data.mutable_residual()->clear_data();
  if (without_data.parameters().has_inline_()) {
    v1::Parameters::Inline* in = without_data.mutable_parameters()->mutable_inline_();
    if (in->has_gamma()) in->mutable_gamma()->clear_data();
    if (in->has_beta()) in->mutable_beta()->clear_data();
  }
  Require(received.message.SerializeAsString() == without_data.SerializeAsString(),
          "received parse and protobuf disagree on a field");
  absl::StatusOr<ForwardPlan> received_plan =
      ValidateNormalize(received.message, received.tensor_data(), limits, *f.store);
  Require(received_plan.status() == plan->status(), "validation differs for the received parse");
  if (!received_plan.ok()) return;
  const ForwardPlan& a = *received_plan;
  const ForwardPlan& b = **plan;
  Require(a.input.bytes == b.input.bytes && a.input.rows == b.input.rows &&
              a.input.hidden == b.input.hidden && a.input.dtype == b.input.dtype,
          "received plan input");
  Require(a.parameters.inline_bytes == b.parameters.inline_bytes, "received plan inline bytes");
  Require(a.return_residual_sum == b.return_residual_sum, "received plan residual sum");
  // Every view present in both or in neither, with the same bytes behind it.
  const int64_t param_bytes = a.input.hidden * Size(a.parameters.dtype);
  const struct {
    const void* a_data;
    const normsvc::server::ReceivedBytes* a_received;
    const void* b_data;
    int64_t bytes;
  } views[] = {
      {a.input.data, a.input.received, b.input.data, a.input.bytes},
      {a.residual, a.residual_received, b.residual, a.input.bytes},
      {a.parameters.gamma, a.parameters.gamma_received, b.parameters.gamma, param_bytes},
      {a.parameters.beta, a.parameters.beta_received, b.parameters.beta, param_bytes},
  };
  for (const auto& view : views) {
    Require((view.a_data != nullptr) == (view.b_data != nullptr), "a view present in one plan");
    if (view.a_data == nullptr || view.bytes == 0) continue;
    std::string through_received(static_cast<size_t>(view.bytes), '\0');
    if (view.a_received != nullptr) {
      Require(view.a_received->size() >= view.bytes, "a received view shorter than its tensor");
      view.a_received->CopyTo(0, view.bytes, through_received.data());
    } else {
      std::memcpy(through_received.data(), view.a_data, static_cast<size_t>(view.bytes));
    }
    Require(std::memcmp(through_received.data(), view.b_data, static_cast<size_t>(view.bytes)) == 0,
            "a received view's bytes differ from protobuf's");
  }
}

void FuzzNormalize(const uint8_t* data, size_t size, const Fixture& f,
                   const RequestLimits& limits) {
  v1::NormalizeRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) {
    CompareReceivedParse(data, size, nullptr, f, limits, nullptr);
    return;
  }
  absl::StatusOr<ForwardPlan> plan = ValidateNormalize(request, limits, *f.store);
  CompareReceivedParse(data, size, &request, f, limits, &plan);
  if (!plan.ok()) {
    Report(plan.status());
    return;
  }
  Report(absl::OkStatus());
  CheckInput(plan->input);
  Require(plan->input.bytes <= limits.max_request_bytes, "request bytes limit");
  Require(plan->input.rows <= limits.max_request_rows, "request rows limit");
  Require(plan->epsilon > 0.0f, "epsilon");
  if (plan->residual != nullptr) TouchBytes(plan->residual, plan->input.bytes);
  Require(!plan->return_residual_sum || plan->residual != nullptr, "residual sum without residual");
  CheckParameters(plan->parameters, plan->input);
}

void FuzzNormalizeBackward(const uint8_t* data, size_t size, const Fixture& f,
                           const RequestLimits& limits) {
  v1::NormalizeBackwardRequest request;
  const bool parsed = request.ParseFromArray(data, static_cast<int>(size));
  // The backward call's parser on the same bytes: the same verdict, the same
  // validation status on the received pieces, and once the data is copied
  // into the message, the same message.
  grpc::ByteBuffer buffer = InputSliced(data, size);
  normsvc::server::ReceivedBackwardRequest received;
  Require(normsvc::server::ParseReceivedBackwardRequest(&buffer, &received).ok() == parsed,
          "received backward parse and protobuf disagree on the bytes");
  if (!parsed) return;
  absl::StatusOr<BackwardPlan> plan = ValidateNormalizeBackward(request, limits, *f.store);
  Require(normsvc::server::CheckNormalizeBackward(received.message, received.tensor_data(), limits,
                                                  *f.store)
                  .status() == plan.status(),
          "validation differs for the received backward parse");
  received.CopyDataIntoMessage();
  Require(received.message.SerializeAsString() == request.SerializeAsString(),
          "received backward parse and protobuf disagree on a field");
  if (!plan.ok()) {
    Report(plan.status());
    return;
  }
  Report(absl::OkStatus());
  CheckInput(plan->input);
  TouchBytes(plan->grad_output, plan->input.bytes);
  if (plan->mean != nullptr) TouchBytes(plan->mean, plan->input.rows * 4);
  if (plan->rstd != nullptr) TouchBytes(plan->rstd, plan->input.rows * 4);
  Require(plan->parameters.beta == nullptr, "backward takes no beta");
  CheckParameters(plan->parameters, plan->input);
}

void FuzzRegister(const uint8_t* data, size_t size, const Fixture& f, const RequestLimits& limits) {
  v1::RegisterParametersRequest request;
  const bool parsed = request.ParseFromArray(data, static_cast<int>(size));
  grpc::ByteBuffer buffer = InputSliced(data, size);  // as for the backward
  normsvc::server::ReceivedRegisterRequest received;
  Require(normsvc::server::ParseReceivedRegisterRequest(&buffer, &received).ok() == parsed,
          "received register parse and protobuf disagree on the bytes");
  if (!parsed) return;
  absl::StatusOr<RegisterPlan> plan = ValidateRegisterParameters(request, limits);
  Require(normsvc::server::CheckRegisterParameters(received.message, received.tensor_data(),
                                                   limits) == plan.status(),
          "validation differs for the received register parse");
  received.CopyDataIntoMessage();
  Require(received.message.SerializeAsString() == request.SerializeAsString(),
          "received register parse and protobuf disagree on a field");
  if (!plan.ok()) {
    Report(plan.status());
    return;
  }
  Report(absl::OkStatus());
  const int64_t bytes = plan->hidden * Size(plan->dtype);
  Require(plan->hidden >= 1 && plan->hidden <= limits.max_hidden_size, "register hidden size");
  Require(!plan->gamma.empty() || !plan->beta.empty(), "register without gamma and beta");
  Require(plan->gamma.empty() || static_cast<int64_t>(plan->gamma.size()) == bytes, "gamma bytes");
  Require(plan->beta.empty() || static_cast<int64_t>(plan->beta.size()) == bytes, "beta bytes");
  // Register into a store of its own, as the control thread would: the
  // shared store stays the same from one input to the next.
  ParameterStore store(ParameterLimits{},
                       std::vector<normsvc::server::Executor*>{f.executor.get()});
  absl::StatusOr<std::shared_ptr<const normsvc::server::ParameterSet>> set =
      store.Register(std::string(plan->name), plan->hidden, plan->dtype, plan->gamma, plan->beta,
                     request.replace());
  Require(set.ok(), "a validated set failed to register");
  Require(store.Find(plan->name) != nullptr, "a registered set is not found");
}

// ---- Seed corpus.

std::string Filled(int64_t bytes, unsigned char value) {
  return std::string(static_cast<size_t>(bytes), static_cast<char>(value));
}

void SetTensor(v1::Tensor* tensor, v1::DType dtype, std::vector<int64_t> shape, int64_t element) {
  tensor->set_dtype(dtype);
  int64_t count = 1;
  for (int64_t dim : shape) {
    tensor->add_shape(dim);
    count *= dim;
  }
  tensor->set_data(Filled(count * element, 0x3f));
}

void WriteSeeds(const std::string& dir) {
  {
    v1::NormalizeRequest r;
    r.set_op(v1::LAYER_NORM);
    SetTensor(r.mutable_input(), v1::FP32, {2, 8}, 4);
    r.mutable_parameters()->set_name("ln");
    WriteSeed(dir, "forward_ln_named", 0, r);
    WriteSeed(dir, "forward_ln_named_default_limits", 3, r);
  }
  {
    v1::NormalizeRequest r;
    r.set_request_id(7);
    r.set_op(v1::RMS_NORM);
    r.set_epsilon(1e-6f);
    SetTensor(r.mutable_input(), v1::BF16, {2, 3, 16}, 2);
    SetTensor(r.mutable_residual(), v1::BF16, {2, 3, 16}, 2);
    r.set_return_residual_sum(true);
    r.set_return_statistics(true);
    r.set_output_dtype(v1::FP32);
    SetTensor(r.mutable_parameters()->mutable_inline_()->mutable_gamma(), v1::FP32, {16}, 4);
    WriteSeed(dir, "forward_rms_residual_inline", 0, r);
  }
  {
    v1::NormalizeRequest r;
    r.set_op(v1::LAYER_NORM);
    SetTensor(r.mutable_input(), v1::FP16, {3, 4}, 2);
    auto* params = r.mutable_parameters()->mutable_inline_();
    SetTensor(params->mutable_gamma(), v1::FP16, {4}, 2);
    SetTensor(params->mutable_beta(), v1::FP16, {4}, 2);
    WriteSeed(dir, "forward_ln_fp16_inline", 0, r);
  }
  {
    v1::NormalizeRequest r;
    r.set_op(v1::LAYER_NORM);
    SetTensor(r.mutable_input(), v1::FP32, {0, 5}, 4);
    WriteSeed(dir, "forward_zero_rows", 0, r);
  }
  {
    v1::NormalizeBackwardRequest r;
    r.set_op(v1::LAYER_NORM);
    SetTensor(r.mutable_input(), v1::FP32, {3, 8}, 4);
    SetTensor(r.mutable_grad_output(), v1::FP32, {3, 8}, 4);
    SetTensor(r.mutable_mean(), v1::FP32, {3}, 4);
    SetTensor(r.mutable_rstd(), v1::FP32, {3}, 4);
    r.mutable_parameters()->set_name("ln");
    WriteSeed(dir, "backward_ln_saved_stats", 1, r);
  }
  {
    v1::NormalizeBackwardRequest r;
    r.set_op(v1::RMS_NORM);
    SetTensor(r.mutable_input(), v1::BF16, {2, 16}, 2);
    SetTensor(r.mutable_grad_output(), v1::BF16, {2, 16}, 2);
    SetTensor(r.mutable_rstd(), v1::FP32, {2}, 4);
    SetTensor(r.mutable_parameters()->mutable_inline_()->mutable_gamma(), v1::BF16, {16}, 2);
    WriteSeed(dir, "backward_rms_inline", 1, r);
    WriteSeed(dir, "backward_rms_inline_default_limits", 4, r);
  }
  {
    v1::RegisterParametersRequest r;
    r.set_name("layer.0_ln-f32");
    SetTensor(r.mutable_gamma(), v1::FP32, {8}, 4);
    SetTensor(r.mutable_beta(), v1::FP32, {8}, 4);
    WriteSeed(dir, "register_gamma_beta", 2, r);
  }
  {
    v1::RegisterParametersRequest r;
    r.set_name("rms");
    r.set_replace(true);
    SetTensor(r.mutable_gamma(), v1::BF16, {16}, 2);
    WriteSeed(dir, "register_replace_bf16", 2, r);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  normsvc::fuzz::InitializeRequestFuzzer(WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Fixture& f = normsvc::fuzz::GetServerFixture();
  // data[0] % 3: the message; (data[0] / 3) % 2: small or default limits.
  const RequestLimits& limits = (data[0] / 3) % 2 == 0 ? f.small_limits : f.default_limits;
  switch (data[0] % 3) {
    case 0:
      FuzzNormalize(data + 1, size - 1, f, limits);
      break;
    case 1:
      FuzzNormalizeBackward(data + 1, size - 1, f, limits);
      break;
    default:
      FuzzRegister(data + 1, size - 1, f, limits);
      break;
  }
  return 0;
}
