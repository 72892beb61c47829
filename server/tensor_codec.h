// Between proto Tensors and the kernels' raw views. Requests are read in
// place (views of the bytes gRPC parsed); responses are built in place (the
// data string is sized once and the executor writes into it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "normsvc/kernels/types.h"
#include "normsvc/v1/normalizer.pb.h"

namespace normsvc::server {

namespace v1 = ::normsvc::v1;

std::optional<kernels::DType> FromProtoDType(v1::DType dtype);
v1::DType ToProtoDType(kernels::DType dtype);
std::optional<kernels::NormOp> FromProtoOp(v1::NormOp op);

inline const void* TensorData(const v1::Tensor& tensor) { return tensor.data().data(); }

// Sets `tensor` to `dtype` with the first `rank` dimensions of `shape`,
// sizes its data to `bytes` and returns where to write them.
void* AllocateTensor(v1::Tensor* tensor, kernels::DType dtype,
                     const google::protobuf::RepeatedField<int64_t>& shape, int rank,
                     std::size_t bytes);

}  // namespace normsvc::server
