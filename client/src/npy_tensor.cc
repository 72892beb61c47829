#include "normsvc/client/npy_tensor.h"

#include <cstring>

#include "normsvc/client/tensor.h"
#include "normsvc/kernels/float16.h"

namespace normsvc::client {
namespace {

v1::DType WireDType(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kFloat16:
      return v1::FP16;
    case NpyDType::kBFloat16:
      return v1::BF16;
    default:
      return v1::FP32;
  }
}

}  // namespace

absl::StatusOr<v1::Tensor> NpyToTensor(const NpyArray& array, std::optional<v1::DType> convert_to) {
  const v1::DType target = convert_to.value_or(WireDType(array.dtype));
  const std::optional<kernels::DType> target_kernel = ToKernelDType(target);
  if (!target_kernel) return absl::InvalidArgumentError("unsupported target dtype");
  v1::Tensor tensor;
  tensor.set_dtype(target);
  if (array.shape.empty()) {
    tensor.add_shape(1);
  } else {
    tensor.mutable_shape()->Add(array.shape.begin(), array.shape.end());
  }
  const int64_t count = static_cast<int64_t>(array.data.size()) / NpyDTypeSize(array.dtype);
  if (array.dtype != NpyDType::kFloat64 && target == WireDType(array.dtype)) {
    tensor.set_data(array.data);
  } else {
    std::string* data = tensor.mutable_data();
    data->resize(static_cast<size_t>(count * DTypeSize(target)));
    for (int64_t i = 0; i < count; ++i) {
      float value = 0;
      if (array.dtype == NpyDType::kFloat64) {
        double wide = 0;
        std::memcpy(&wide, array.data.data() + i * 8, 8);
        value = static_cast<float>(wide);
      } else {
        value = kernels::LoadAsFloat(array.data.data(), *ToKernelDType(WireDType(array.dtype)), i);
      }
      kernels::StoreFromFloat(data->data(), *target_kernel, i, value);
    }
  }
  if (absl::Status status = ValidateTensor(tensor); !status.ok()) return status;
  return tensor;
}

absl::StatusOr<NpyArray> TensorToNpy(const v1::Tensor& tensor) {
  // A tensor without dimensions is a scalar (e.g. the mean of a 1-D input):
  // one element, written as a 0-d array.
  v1::Tensor checked_shape;
  const v1::Tensor* checked = &tensor;
  if (tensor.shape_size() == 0) {
    checked_shape.set_dtype(tensor.dtype());
    checked_shape.add_shape(1);
    checked_shape.set_data(tensor.data());
    checked = &checked_shape;
  }
  if (absl::Status status = ValidateTensor(*checked); !status.ok()) return status;
  NpyArray array;
  switch (tensor.dtype()) {
    case v1::FP16:
      array.dtype = NpyDType::kFloat16;
      break;
    case v1::BF16:
      array.dtype = NpyDType::kBFloat16;
      break;
    default:
      array.dtype = NpyDType::kFloat32;
  }
  array.shape.assign(tensor.shape().begin(), tensor.shape().end());
  array.data = tensor.data();
  return array;
}

}  // namespace normsvc::client
