#include "normsvc/client/tensor.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "normsvc/kernels/float16.h"

namespace normsvc::client {

int64_t DTypeSize(v1::DType dtype) {
  switch (dtype) {
    case v1::FP32:
      return 4;
    case v1::FP16:
    case v1::BF16:
      return 2;
    default:
      return 0;
  }
}

std::string_view DTypeName(v1::DType dtype) {
  switch (dtype) {
    case v1::FP32:
      return "fp32";
    case v1::FP16:
      return "fp16";
    case v1::BF16:
      return "bf16";
    default:
      return "unspecified";
  }
}

std::optional<v1::DType> ParseDType(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(std::string(name));
  if (lower == "fp32" || lower == "float32" || lower == "f32") return v1::FP32;
  if (lower == "fp16" || lower == "float16" || lower == "f16") return v1::FP16;
  if (lower == "bf16" || lower == "bfloat16") return v1::BF16;
  return std::nullopt;
}

std::string_view NormOpName(v1::NormOp op) {
  switch (op) {
    case v1::LAYER_NORM:
      return "layernorm";
    case v1::RMS_NORM:
      return "rmsnorm";
    default:
      return "unspecified";
  }
}

std::optional<v1::NormOp> ParseNormOp(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(std::string(name));
  if (lower == "layernorm" || lower == "layer_norm") return v1::LAYER_NORM;
  if (lower == "rmsnorm" || lower == "rms_norm") return v1::RMS_NORM;
  return std::nullopt;
}

std::optional<kernels::DType> ToKernelDType(v1::DType dtype) {
  switch (dtype) {
    case v1::FP32:
      return kernels::DType::kF32;
    case v1::FP16:
      return kernels::DType::kF16;
    case v1::BF16:
      return kernels::DType::kBF16;
    default:
      return std::nullopt;
  }
}

std::optional<kernels::NormOp> ToKernelOp(v1::NormOp op) {
  switch (op) {
    case v1::LAYER_NORM:
      return kernels::NormOp::kLayerNorm;
    case v1::RMS_NORM:
      return kernels::NormOp::kRmsNorm;
    default:
      return std::nullopt;
  }
}

absl::StatusOr<int64_t> ElementCount(std::span<const int64_t> shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return absl::InvalidArgumentError(absl::StrCat("negative dimension ", dim));
    if (dim != 0 && count > std::numeric_limits<int64_t>::max() / dim) {
      return absl::InvalidArgumentError("shape product overflows");
    }
    count *= dim;
  }
  return count;
}

absl::Status ValidateTensor(const v1::Tensor& tensor) {
  const int64_t element_size = DTypeSize(tensor.dtype());
  if (element_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported dtype ", tensor.dtype()));
  }
  if (tensor.shape_size() == 0) return absl::InvalidArgumentError("tensor has no dimensions");
  absl::StatusOr<int64_t> count =
      ElementCount(std::span<const int64_t>(tensor.shape().data(), tensor.shape_size()));
  if (!count.ok()) return count.status();
  if (*count > std::numeric_limits<int64_t>::max() / element_size ||
      static_cast<uint64_t>(*count * element_size) != tensor.data().size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor data has ", tensor.data().size(),
                                                   " bytes; shape and dtype need ", *count, " x ",
                                                   element_size));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Tensor> MakeTensor(v1::DType dtype, std::span<const int64_t> shape,
                                      std::string_view bytes) {
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  tensor.mutable_shape()->Add(shape.begin(), shape.end());
  tensor.set_data(bytes.data(), bytes.size());
  if (absl::Status status = ValidateTensor(tensor); !status.ok()) return status;
  return tensor;
}

absl::StatusOr<v1::Tensor> MakeTensorFromFloats(v1::DType dtype, std::span<const int64_t> shape,
                                                std::span<const float> values) {
  const std::optional<kernels::DType> kernel_dtype = ToKernelDType(dtype);
  if (!kernel_dtype) return absl::InvalidArgumentError("unsupported dtype");
  absl::StatusOr<int64_t> count = ElementCount(shape);
  if (!count.ok()) return count.status();
  if (static_cast<uint64_t>(*count) != values.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(values.size(), " values for a shape of ", *count, " elements"));
  }
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  tensor.mutable_shape()->Add(shape.begin(), shape.end());
  std::string* data = tensor.mutable_data();
  data->resize(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    kernels::StoreFromFloat(data->data(), *kernel_dtype, static_cast<int64_t>(i), values[i]);
  }
  return tensor;
}

absl::StatusOr<std::vector<float>> TensorToFloats(const v1::Tensor& tensor) {
  if (absl::Status status = ValidateTensor(tensor); !status.ok()) return status;
  const kernels::DType dtype = *ToKernelDType(tensor.dtype());
  const int64_t count = static_cast<int64_t>(tensor.data().size()) / DTypeSize(tensor.dtype());
  std::vector<float> values(count);
  for (int64_t i = 0; i < count; ++i)
    values[i] = kernels::LoadAsFloat(tensor.data().data(), dtype, i);
  return values;
}

absl::StatusOr<std::vector<double>> TensorToDoubles(const v1::Tensor& tensor) {
  absl::StatusOr<std::vector<float>> floats = TensorToFloats(tensor);
  if (!floats.ok()) return floats.status();
  return std::vector<double>(floats->begin(), floats->end());
}

absl::StatusOr<RowsAndHidden> GetRowsAndHidden(const v1::Tensor& tensor) {
  if (absl::Status status = ValidateTensor(tensor); !status.ok()) return status;
  RowsAndHidden result;
  result.hidden = tensor.shape(tensor.shape_size() - 1);
  absl::StatusOr<int64_t> rows =
      ElementCount(std::span<const int64_t>(tensor.shape().data(), tensor.shape_size() - 1));
  if (!rows.ok()) return rows.status();
  result.rows = *rows;
  return result;
}

}  // namespace normsvc::client
