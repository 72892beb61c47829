// Turns a validated plan into a Task and sizes the response tensors in
// place, so executors write results straight into the reply.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/time/time.h"
#include "normsvc/v1/normalizer.pb.h"
#include "server/task.h"
#include "server/validation.h"

namespace normsvc::server {

// Where a forward task's result tensors live: a NormalizeResponse message,
// or the encoded reply itself (WireResponse, wire_response.h).
class ForwardResultMemory {
 public:
  virtual ~ForwardResultMemory() = default;
  // Describes NormalizeResponse's Tensor field `field` (its field number) as
  // `dtype` with the first `rank` dimensions of `shape`, and returns where
  // the `bytes` bytes of its data are to be written.
  virtual void* AllocateTensor(int field, kernels::DType dtype,
                               const google::protobuf::RepeatedField<int64_t>& shape, int rank,
                               std::size_t bytes) = 0;
};

// Allocates the result tensors in field-number order: output, then
// residual_sum, mean and rstd when asked for.
std::unique_ptr<Task> BuildForwardTask(const ForwardPlan& plan, const v1::NormalizeRequest& request,
                                       ForwardResultMemory& results, absl::Time deadline,
                                       TaskSink* sink);
// The same, into `response`.
std::unique_ptr<Task> BuildForwardTask(const ForwardPlan& plan, const v1::NormalizeRequest& request,
                                       v1::NormalizeResponse* response, absl::Time deadline,
                                       TaskSink* sink);

// The input and output bytes of the task BuildForwardTask makes from `plan`
// (Task::input_bytes, output_bytes), from the plan's sizes alone.
struct ForwardTaskBytes {
  int64_t input = 0;
  int64_t output = 0;
  int64_t memory() const { return input + output; }
};
ForwardTaskBytes ForwardTaskBytesOf(const ForwardPlan& plan);

// The input and output bytes of the task BuildBackwardTask makes from
// `plan` (Task::input_bytes, output_bytes; memory_bytes() is their sum),
// from the plan's sizes alone: known before the request's tensors are
// copied and its reply allocated (CheckNormalizeBackward's plan gives it).
struct BackwardTaskBytes {
  int64_t input = 0;
  int64_t output = 0;
  int64_t memory() const { return input + output; }
};
BackwardTaskBytes BackwardTaskBytesOf(const BackwardPlan& plan);

// grad_gamma is always returned (FP32 [H]); grad_beta for LAYER_NORM.
std::unique_ptr<Task> BuildBackwardTask(const BackwardPlan& plan,
                                        const v1::NormalizeBackwardRequest& request,
                                        v1::NormalizeBackwardResponse* response,
                                        absl::Time deadline, TaskSink* sink);

}  // namespace normsvc::server
