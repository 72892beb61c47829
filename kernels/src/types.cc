#include "normsvc/kernels/types.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

namespace normsvc::kernels {
namespace {

bool IsKnownDType(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

Status Invalid(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }

Status CheckEpsilon(float epsilon) {
  if (!std::isfinite(epsilon) || epsilon <= 0.0f) {
    return Invalid("epsilon must be finite and > 0, got " + std::to_string(epsilon));
  }
  return Status::Ok();
}

Status CheckShape(int64_t rows, int64_t hidden) {
  if (rows < 0) return Invalid("rows must be >= 0");
  if (hidden < 1 || hidden > kMaxHidden) {
    return Invalid("hidden size must be in [1, " + std::to_string(kMaxHidden) + "], got " +
                   std::to_string(hidden));
  }
  return Status::Ok();
}

// A tensor of `rows` > 0 rows: its stride at least H, and its extent
// ((rows - 1) x stride + H elements) within kMaxTensorBytes, checked without
// forming the product.
Status CheckLayout(const char* name, int64_t rows, int64_t stride, int64_t hidden,
                   std::size_t element_bytes) {
  if (stride < hidden) {
    return Invalid(std::string(name) + " row stride " + std::to_string(stride) +
                   " is smaller than the hidden size " + std::to_string(hidden));
  }
  const int64_t max_elements = kMaxTensorBytes / static_cast<int64_t>(element_bytes);
  if (rows - 1 > (max_elements - hidden) / stride) {
    return Invalid(std::string(name) + ": " + std::to_string(rows) + " rows of stride " +
                   std::to_string(stride) + " span more than " + std::to_string(kMaxTensorBytes) +
                   " bytes");
  }
  return Status::Ok();
}

// Every element access is at least as wide as the element: a pointer off
// its element boundary would fault on the device (a sticky CUDA error) or be
// undefined on the host, so it is refused here instead. Null passes.
Status CheckElementAligned(const char* name, const void* p, std::size_t element_bytes) {
  if (reinterpret_cast<std::uintptr_t>(p) % element_bytes != 0) {
    return Invalid(std::string(name) + " is not aligned to its " + std::to_string(element_bytes) +
                   "-byte elements");
  }
  return Status::Ok();
}

Status CheckParamDType(DType param_dtype, DType x_dtype) {
  if (param_dtype != DType::kF32 && param_dtype != x_dtype) {
    return Invalid("gamma/beta dtype must be fp32 or the activation dtype");
  }
  return Status::Ok();
}

}  // namespace

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "fp32";
    case DType::kF16:
      return "fp16";
    case DType::kBF16:
      return "bf16";
  }
  return "unknown";
}

const char* NormOpName(NormOp op) {
  switch (op) {
    case NormOp::kLayerNorm:
      return "layer_norm";
    case NormOp::kRmsNorm:
      return "rms_norm";
  }
  return "unknown";
}

Status ValidateForwardSegment(const ForwardSegment& s) {
  if (s.op != NormOp::kLayerNorm && s.op != NormOp::kRmsNorm) return Invalid("unknown op");
  if (!IsKnownDType(s.x_dtype) || !IsKnownDType(s.out_dtype) || !IsKnownDType(s.param_dtype)) {
    return Invalid("unknown dtype");
  }
  if (Status st = CheckEpsilon(s.epsilon); !st.ok()) return st;
  if (Status st = CheckShape(s.rows, s.hidden); !st.ok()) return st;
  if (Status st = CheckParamDType(s.param_dtype, s.x_dtype); !st.ok()) return st;
  if (s.rows == 0) return Status::Ok();
  if (s.x == nullptr || s.out == nullptr) return Invalid("x and out are required");
  const std::size_t x_bytes = DTypeSize(s.x_dtype);
  if (Status st = CheckLayout("x", s.rows, s.x_row_stride, s.hidden, x_bytes); !st.ok()) return st;
  if (Status st = CheckLayout("out", s.rows, s.out_row_stride, s.hidden, DTypeSize(s.out_dtype));
      !st.ok()) {
    return st;
  }
  if (s.residual != nullptr) {
    if (Status st = CheckLayout("residual", s.rows, s.residual_row_stride, s.hidden, x_bytes);
        !st.ok()) {
      return st;
    }
  }
  if (s.residual_out != nullptr) {
    if (s.residual == nullptr) return Invalid("residual_out requires residual");
    if (Status st =
            CheckLayout("residual_out", s.rows, s.residual_out_row_stride, s.hidden, x_bytes);
        !st.ok()) {
      return st;
    }
  }
  if (s.op == NormOp::kRmsNorm) {
    if (s.beta != nullptr) return Invalid("RMSNorm takes no beta");
    if (s.mean != nullptr) return Invalid("RMSNorm saves no mean");
  }
  const std::size_t param_bytes = DTypeSize(s.param_dtype);
  for (const auto& [name, p, bytes] :
       {std::tuple<const char*, const void*, std::size_t>{"x", s.x, x_bytes},
        {"residual", s.residual, x_bytes},
        {"residual_out", s.residual_out, x_bytes},
        {"gamma", s.gamma, param_bytes},
        {"beta", s.beta, param_bytes},
        {"out", s.out, DTypeSize(s.out_dtype)},
        {"mean", s.mean, sizeof(float)},
        {"rstd", s.rstd, sizeof(float)}}) {
    if (Status st = CheckElementAligned(name, p, bytes); !st.ok()) return st;
  }
  return Status::Ok();
}

Status ValidateBackwardArgs(const BackwardArgs& a) {
  if (a.op != NormOp::kLayerNorm && a.op != NormOp::kRmsNorm) return Invalid("unknown op");
  if (!IsKnownDType(a.x_dtype) || !IsKnownDType(a.param_dtype)) return Invalid("unknown dtype");
  if (Status st = CheckEpsilon(a.epsilon); !st.ok()) return st;
  if (Status st = CheckShape(a.rows, a.hidden); !st.ok()) return st;
  if (Status st = CheckParamDType(a.param_dtype, a.x_dtype); !st.ok()) return st;
  if (a.op == NormOp::kRmsNorm) {
    if (a.mean != nullptr) return Invalid("RMSNorm takes no saved mean");
    if (a.dbeta != nullptr) return Invalid("RMSNorm has no dbeta");
  }
  if (a.op == NormOp::kLayerNorm && ((a.mean == nullptr) != (a.rstd == nullptr))) {
    return Invalid("LayerNorm backward takes both saved mean and rstd, or neither");
  }
  if (a.rows == 0) return Status::Ok();
  if (a.x == nullptr || a.dy == nullptr || a.dx == nullptr) {
    return Invalid("x, dy and dx are required");
  }
  const std::size_t x_bytes = DTypeSize(a.x_dtype);
  for (const auto& [name, stride] : {std::pair<const char*, int64_t>{"x", a.x_row_stride},
                                     {"dy", a.dy_row_stride},
                                     {"dx", a.dx_row_stride}}) {
    if (Status st = CheckLayout(name, a.rows, stride, a.hidden, x_bytes); !st.ok()) return st;
  }
  for (const auto& [name, p, bytes] :
       {std::tuple<const char*, const void*, std::size_t>{"x", a.x, x_bytes},
        {"dy", a.dy, x_bytes},
        {"dx", a.dx, x_bytes},
        {"gamma", a.gamma, DTypeSize(a.param_dtype)},
        {"mean", a.mean, sizeof(float)},
        {"rstd", a.rstd, sizeof(float)},
        {"dgamma", a.dgamma, sizeof(float)},
        {"dbeta", a.dbeta, sizeof(float)}}) {
    if (Status st = CheckElementAligned(name, p, bytes); !st.ok()) return st;
  }
  return Status::Ok();
}

Status ValidateForwardSegments(const ForwardSegment* segments, int count) {
  if (count < 0 || (count > 0 && segments == nullptr)) {
    return Invalid("segments must not be null and count must be >= 0");
  }
  int64_t elements = 0;
  for (int i = 0; i < count; ++i) {
    if (Status st = ValidateForwardSegment(segments[i]); !st.ok()) {
      return Status(st.code(), "segment " + std::to_string(i) + ": " + st.message());
    }
    // Each term is within kMaxTensorBytes (its x extent is), so the sum
    // cannot overflow before it passes the bound.
    elements += segments[i].rows * segments[i].hidden;
    if (elements > kMaxTensorBytes) {
      return Invalid("the segments together hold more than " + std::to_string(kMaxTensorBytes) +
                     " elements");
    }
  }
  return Status::Ok();
}

}  // namespace normsvc::kernels
