// Turns a validated plan into a Task and sizes the response tensors in
// place, so executors write results straight into the reply.
#pragma once

#include <memory>

#include "absl/time/time.h"
#include "normsvc/v1/normalizer.pb.h"
#include "server/task.h"
#include "server/validation.h"

namespace normsvc::server {

std::unique_ptr<Task> BuildForwardTask(const ForwardPlan& plan, const v1::NormalizeRequest& request,
                                       v1::NormalizeResponse* response, absl::Time deadline,
                                       TaskSink* sink);

// grad_gamma is always returned (FP32 [H]); grad_beta for LAYER_NORM.
std::unique_ptr<Task> BuildBackwardTask(const BackwardPlan& plan,
                                        const v1::NormalizeBackwardRequest& request,
                                        v1::NormalizeBackwardResponse* response,
                                        absl::Time deadline, TaskSink* sink);

}  // namespace normsvc::server
