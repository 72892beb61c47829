// Tensor helpers: build normsvc.v1.Tensor messages from raw buffers and
// shapes, check them, and decode them to float.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "normsvc/kernels/types.h"
#include "normsvc/v1/normalizer.pb.h"

namespace normsvc::client {

// Element size of a wire dtype; 0 for DTYPE_UNSPECIFIED or unknown values.
int64_t DTypeSize(v1::DType dtype);
// "fp32", "fp16", "bf16" (the names normctl, normload and the metrics use).
std::string_view DTypeName(v1::DType dtype);
std::optional<v1::DType> ParseDType(std::string_view name);
// "layernorm" / "rmsnorm"; ParseNormOp also accepts layer_norm, rms_norm.
std::string_view NormOpName(v1::NormOp op);
std::optional<v1::NormOp> ParseNormOp(std::string_view name);

// Conversions to the kernels' enums (for the CPU reference).
std::optional<kernels::DType> ToKernelDType(v1::DType dtype);
std::optional<kernels::NormOp> ToKernelOp(v1::NormOp op);

// Number of elements of `shape`; an error when a dimension is negative or
// the product overflows int64.
absl::StatusOr<int64_t> ElementCount(std::span<const int64_t> shape);

// A tensor with a copy of `bytes`; fails when the byte count does not match
// shape x dtype size.
absl::StatusOr<v1::Tensor> MakeTensor(v1::DType dtype, std::span<const int64_t> shape,
                                      std::string_view bytes);
// A tensor holding `values` rounded to `dtype` (round to nearest even).
absl::StatusOr<v1::Tensor> MakeTensorFromFloats(v1::DType dtype, std::span<const int64_t> shape,
                                                std::span<const float> values);

// Checks dtype, shape (>= 1 dimension, no negatives) and that the byte
// length equals product(shape) x dtype size.
absl::Status ValidateTensor(const v1::Tensor& tensor);

// The tensor's elements widened to float (after ValidateTensor).
absl::StatusOr<std::vector<float>> TensorToFloats(const v1::Tensor& tensor);
// Same, widened to double (for comparisons with the reference oracle).
absl::StatusOr<std::vector<double>> TensorToDoubles(const v1::Tensor& tensor);

// Rows and hidden size of a tensor normalized over its last dimension.
struct RowsAndHidden {
  int64_t rows = 0;
  int64_t hidden = 0;
};
absl::StatusOr<RowsAndHidden> GetRowsAndHidden(const v1::Tensor& tensor);

}  // namespace normsvc::client
