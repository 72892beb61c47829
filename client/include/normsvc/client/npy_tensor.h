// Conversions between .npy arrays and normsvc.v1.Tensor messages.
// fp32 <-> '<f4', fp16 <-> '<f2', bf16 <-> '<u2' bit patterns (see npy.h);
// '<f8' arrays are rounded to fp32 (or to `convert_to`).
#pragma once

#include <optional>

#include "absl/status/statusor.h"
#include "normsvc/client/npy.h"
#include "normsvc/v1/normalizer.pb.h"

namespace normsvc::client {

// The array as a tensor of its own dtype, or re-encoded to `convert_to`
// (round to nearest even). A 0-d array becomes a tensor of shape [1].
absl::StatusOr<v1::Tensor> NpyToTensor(const NpyArray& array,
                                       std::optional<v1::DType> convert_to = std::nullopt);
// The tensor as an array of the matching .npy dtype (bytes copied as is); a
// tensor without dimensions holds one element and becomes a 0-d array.
absl::StatusOr<NpyArray> TensorToNpy(const v1::Tensor& tensor);

}  // namespace normsvc::client
