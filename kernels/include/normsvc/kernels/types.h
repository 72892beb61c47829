// Plain types shared by the GPU launchers and the CPU reference.
//
// Contract: nothing in this header depends on CUDA, gRPC, protobuf or Abseil,
// so every component (server, client, tests) can include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace normsvc::kernels {

enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };
enum class NormOp : uint8_t { kLayerNorm = 0, kRmsNorm = 1 };

// Size in bytes of one element of `dtype`.
constexpr std::size_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }
const char* DTypeName(DType dtype);
const char* NormOpName(NormOp op);

// The largest hidden size every kernel path supports.
inline constexpr int64_t kMaxHidden = 1 << 20;

// The largest extent of one tensor, in bytes ((rows - 1) x row stride + H
// elements), and of the elements of one call's segments together: 2^48,
// beyond the memory any process can address today, so that every element
// offset and count a kernel or the reference forms from rows and strides
// fits in int64_t. A larger one can only come from a wrong row count or
// stride, and is refused instead of overflowing into a wrong address.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 48;

// Error value returned by launchers and the reference. Kernels never throw.
enum class Code : uint8_t { kOk = 0, kInvalidArgument, kResourceExhausted, kInternal };

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// One independent tensor (a request, or part of one) in a forward launch.
// All row strides are in elements. Pointers are device pointers for the GPU
// launchers and host pointers for the CPU reference.
//
// Semantics per row r in [0, rows):
//   v      = x[r] + residual[r], rounded to x_dtype   (residual optional)
//   residual_out[r] = v                    (optional; written in x_dtype)
// The rounded sum is what is normalized, so residual_out is exactly the x a
// later backward pass must be given.
//   LayerNorm: y = (v - mean(v)) * rstd * gamma + beta,  rstd = 1/sqrt(var(v) + eps)
//   RMSNorm:   y = v * rstd * gamma,                     rstd = 1/sqrt(mean(v^2) + eps)
//   out[r] = y in out_dtype; mean[r], rstd[r] in fp32 (optional; RMSNorm: no mean)
// var is the biased (population) variance; accumulation is in fp32 on the GPU
// and in double in the reference; gamma missing means 1, beta missing means 0.
struct ForwardSegment {
  NormOp op = NormOp::kLayerNorm;
  int64_t rows = 0;
  int64_t hidden = 0;
  float epsilon = 1e-5f;
  DType x_dtype = DType::kF32;      // x, residual and residual_out
  DType out_dtype = DType::kF32;    // out
  DType param_dtype = DType::kF32;  // gamma and beta: x_dtype or kF32

  const void* x = nullptr;
  int64_t x_row_stride = 0;
  const void* residual = nullptr;  // optional
  int64_t residual_row_stride = 0;
  void* residual_out = nullptr;  // optional, requires residual
  int64_t residual_out_row_stride = 0;
  const void* gamma = nullptr;  // optional, [hidden]
  const void* beta = nullptr;   // optional, [hidden]; LayerNorm only
  void* out = nullptr;
  int64_t out_row_stride = 0;
  float* mean = nullptr;  // optional, [rows]; LayerNorm only
  float* rstd = nullptr;  // optional, [rows]
};

// Backward of one tensor. dx has x_dtype; dgamma and dbeta are fp32 [hidden],
// reduced over all rows in a fixed order (bitwise reproducible).
//   xhat = (x - mean) * rstd  (RMSNorm: x * rstd),  g = dy * gamma
//   LayerNorm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   RMSNorm:   dx = rstd * (g - xhat * mean(g * xhat))
//   dgamma = sum_rows(dy * xhat),  dbeta = sum_rows(dy)   (LayerNorm only)
// When mean/rstd are null they are recomputed from x with epsilon.
struct BackwardArgs {
  NormOp op = NormOp::kLayerNorm;
  int64_t rows = 0;
  int64_t hidden = 0;
  float epsilon = 1e-5f;
  DType x_dtype = DType::kF32;  // x, dy and dx
  DType param_dtype = DType::kF32;

  const void* x = nullptr;
  int64_t x_row_stride = 0;
  const void* dy = nullptr;
  int64_t dy_row_stride = 0;
  const void* gamma = nullptr;  // optional
  const float* mean = nullptr;  // optional, LayerNorm
  const float* rstd = nullptr;  // optional
  void* dx = nullptr;
  int64_t dx_row_stride = 0;
  float* dgamma = nullptr;  // optional
  float* dbeta = nullptr;   // optional, LayerNorm only
};

// Checks everything about a segment that does not need to dereference its
// pointers: sizes, strides, dtypes, epsilon, and which optional parts are
// allowed for the op. Used by both the GPU launchers and the reference.
Status ValidateForwardSegment(const ForwardSegment& segment);
Status ValidateBackwardArgs(const BackwardArgs& args);
// The segments of one call: `count` >= 0, `segments` not null when count >
// 0, each segment valid (its errors prefixed "segment i: "), and their rows
// x H together at most kMaxTensorBytes elements.
Status ValidateForwardSegments(const ForwardSegment* segments, int count);

}  // namespace normsvc::kernels
