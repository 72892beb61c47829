#include "server/tensor_codec.h"

namespace normsvc::server {

std::optional<kernels::DType> FromProtoDType(v1::DType dtype) {
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

v1::DType ToProtoDType(kernels::DType dtype) {
  switch (dtype) {
    case kernels::DType::kF32:
      return v1::FP32;
    case kernels::DType::kF16:
      return v1::FP16;
    case kernels::DType::kBF16:
      return v1::BF16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

std::optional<kernels::NormOp> FromProtoOp(v1::NormOp op) {
  switch (op) {
    case v1::LAYER_NORM:
      return kernels::NormOp::kLayerNorm;
    case v1::RMS_NORM:
      return kernels::NormOp::kRmsNorm;
    default:
      return std::nullopt;
  }
}

void* AllocateTensor(v1::Tensor* tensor, kernels::DType dtype,
                     const google::protobuf::RepeatedField<int64_t>& shape, int rank,
                     std::size_t bytes) {
  tensor->set_dtype(ToProtoDType(dtype));
  tensor->mutable_shape()->Reserve(rank);
  for (int i = 0; i < rank; ++i) tensor->add_shape(shape.Get(i));
  std::string* data = tensor->mutable_data();
  data->resize(bytes);
  return data->data();
}

}  // namespace normsvc::server
