#include "server/task_builder.h"

#include "server/staging_layout.h"
#include "server/tensor_codec.h"

namespace normsvc::server {
namespace {

int64_t Size(kernels::DType dtype) { return static_cast<int64_t>(kernels::DTypeSize(dtype)); }

// The fields every task carries, whatever its kind.
std::unique_ptr<Task> NewTask(TaskKind kind, const TensorView& input,
                              std::shared_ptr<const ParameterSet> parameters, absl::Time deadline,
                              TaskSink* sink) {
  auto task = std::make_unique<Task>();
  task->kind = kind;
  task->rows = input.rows;
  task->hidden = input.hidden;
  task->deadline = deadline;
  task->sink = sink;
  task->parameters = std::move(parameters);
  return task;
}

// The result tensors as fields of a NormalizeResponse message.
class ProtoResultMemory final : public ForwardResultMemory {
 public:
  explicit ProtoResultMemory(v1::NormalizeResponse* response) : response_(response) {}
  void* AllocateTensor(int field, kernels::DType dtype,
                       const google::protobuf::RepeatedField<int64_t>& shape, int rank,
                       std::size_t bytes) override {
    return server::AllocateTensor(TensorField(field), dtype, shape, rank, bytes);
  }

 private:
  v1::Tensor* TensorField(int field) {
    switch (field) {
      case v1::NormalizeResponse::kResidualSumFieldNumber:
        return response_->mutable_residual_sum();
      case v1::NormalizeResponse::kMeanFieldNumber:
        return response_->mutable_mean();
      case v1::NormalizeResponse::kRstdFieldNumber:
        return response_->mutable_rstd();
      default:
        return response_->mutable_output();
    }
  }
  v1::NormalizeResponse* const response_;
};

}  // namespace

std::unique_ptr<Task> BuildForwardTask(const ForwardPlan& plan, const v1::NormalizeRequest& request,
                                       ForwardResultMemory& results, absl::Time deadline,
                                       TaskSink* sink) {
  const TensorView& in = plan.input;
  const auto& shape = request.input().shape();
  const int rank = shape.size();
  std::unique_ptr<Task> task = NewTask(TaskKind::kForward, in, plan.parameters.set, deadline, sink);

  kernels::ForwardSegment& s = task->forward;
  s.op = plan.op;
  s.rows = in.rows;
  s.hidden = in.hidden;
  s.epsilon = plan.epsilon;
  s.x_dtype = in.dtype;
  s.out_dtype = plan.out_dtype;
  s.param_dtype = plan.parameters.dtype;
  s.x = in.data;
  s.x_row_stride = in.hidden;
  s.residual = plan.residual;
  s.residual_row_stride = in.hidden;
  s.gamma = plan.parameters.gamma;
  s.beta = plan.parameters.beta;
  task->received = {in.received, plan.residual_received, plan.parameters.gamma_received,
                    plan.parameters.beta_received};

  const int64_t elements = in.rows * in.hidden;
  s.out = results.AllocateTensor(v1::NormalizeResponse::kOutputFieldNumber, plan.out_dtype, shape,
                                 rank, elements * Size(plan.out_dtype));
  s.out_row_stride = in.hidden;
  if (plan.return_residual_sum) {
    s.residual_out = results.AllocateTensor(v1::NormalizeResponse::kResidualSumFieldNumber,
                                            in.dtype, shape, rank, in.bytes);
    s.residual_out_row_stride = in.hidden;
  }
  if (plan.return_statistics) {
    if (plan.op == kernels::NormOp::kLayerNorm) {
      s.mean = static_cast<float*>(results.AllocateTensor(v1::NormalizeResponse::kMeanFieldNumber,
                                                          kernels::DType::kF32, shape, rank - 1,
                                                          in.rows * 4));
    }
    s.rstd = static_cast<float*>(results.AllocateTensor(v1::NormalizeResponse::kRstdFieldNumber,
                                                        kernels::DType::kF32, shape, rank - 1,
                                                        in.rows * 4));
  }
  const ForwardTaskBytes bytes = ForwardTaskBytesOf(plan);
  task->input_bytes = bytes.input;
  task->output_bytes = bytes.output;
  task->staging_bytes = TaskStagingBytes(*task);
  return task;
}

std::unique_ptr<Task> BuildForwardTask(const ForwardPlan& plan, const v1::NormalizeRequest& request,
                                       v1::NormalizeResponse* response, absl::Time deadline,
                                       TaskSink* sink) {
  ProtoResultMemory results(response);
  return BuildForwardTask(plan, request, results, deadline, sink);
}

ForwardTaskBytes ForwardTaskBytesOf(const ForwardPlan& plan) {
  ForwardTaskBytes bytes;
  // x, the residual, inline gamma and beta; the reply's tensors.
  bytes.input =
      plan.input.bytes * (plan.residual != nullptr ? 2 : 1) + plan.parameters.inline_bytes;
  bytes.output = ForwardReplyDataBytes(plan);
  return bytes;
}

BackwardTaskBytes BackwardTaskBytesOf(const BackwardPlan& plan) {
  const TensorView& in = plan.input;
  BackwardTaskBytes bytes;
  // x and dy, inline gamma, the saved statistics given.
  bytes.input = 2 * in.bytes + plan.parameters.inline_bytes +
                (plan.mean != nullptr ? in.rows * 4 : 0) + (plan.rstd != nullptr ? in.rows * 4 : 0);
  // dx, dgamma, and dbeta for LayerNorm.
  bytes.output = in.bytes + in.hidden * 4 * (plan.op == kernels::NormOp::kLayerNorm ? 2 : 1);
  return bytes;
}

std::unique_ptr<Task> BuildBackwardTask(const BackwardPlan& plan,
                                        const v1::NormalizeBackwardRequest& request,
                                        v1::NormalizeBackwardResponse* response,
                                        absl::Time deadline, TaskSink* sink) {
  const TensorView& in = plan.input;
  const auto& shape = request.input().shape();
  std::unique_ptr<Task> task =
      NewTask(TaskKind::kBackward, in, plan.parameters.set, deadline, sink);

  kernels::BackwardArgs& b = task->backward;
  b.op = plan.op;
  b.rows = in.rows;
  b.hidden = in.hidden;
  b.epsilon = plan.epsilon;
  b.x_dtype = in.dtype;
  b.param_dtype = plan.parameters.dtype;
  b.x = in.data;
  b.x_row_stride = in.hidden;
  b.dy = plan.grad_output;
  b.dy_row_stride = in.hidden;
  b.gamma = plan.parameters.gamma;
  b.mean = plan.mean;
  b.rstd = plan.rstd;
  b.dx = AllocateTensor(response->mutable_grad_input(), in.dtype, shape, shape.size(), in.bytes);
  b.dx_row_stride = in.hidden;
  google::protobuf::RepeatedField<int64_t> param_shape;
  param_shape.Add(in.hidden);
  b.dgamma = static_cast<float*>(AllocateTensor(
      response->mutable_grad_gamma(), kernels::DType::kF32, param_shape, 1, in.hidden * 4));
  if (plan.op == kernels::NormOp::kLayerNorm) {
    b.dbeta = static_cast<float*>(AllocateTensor(
        response->mutable_grad_beta(), kernels::DType::kF32, param_shape, 1, in.hidden * 4));
  }
  const BackwardTaskBytes bytes = BackwardTaskBytesOf(plan);
  task->input_bytes = bytes.input;
  task->output_bytes = bytes.output;
  task->staging_bytes = TaskStagingBytes(*task);
  return task;
}

}  // namespace normsvc::server
