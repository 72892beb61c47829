// A NormalizeResponse encoded by hand into the gRPC slices that are sent, so
// that an executor writes each result tensor straight into memory gRPC
// sends. A protobuf message would cost one more copy of every result byte:
// its serialization copies the data strings into a new slice.
//
// The encoding is the one protobuf's own serializer produces for the same
// message (fields in number order, proto3 defaults omitted, shapes packed),
// as long as tensors are added in field-number order; BuildForwardTask adds
// them so, for Normalize and for NormalizeStream (WrapStreamResponse).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include "normsvc/kernels/types.h"
#include "normsvc/v1/normalizer.pb.h"
#include "server/task_builder.h"

namespace normsvc::server {

class WireResponse final : public ForwardResultMemory {
 public:
  void set_request_id(uint64_t request_id) { request_id_ = request_id; }

  // Appends the Tensor field `field` of NormalizeResponse: `dtype`, the
  // first `rank` dimensions of `shape`, and `bytes` bytes of data that the
  // caller writes at the returned address (heap memory of gRPC's own
  // allocator, uninitialized; valid while any buffer from TakeBuffer lives).
  void* AllocateTensor(int field, kernels::DType dtype,
                       const google::protobuf::RepeatedField<int64_t>& shape, int rank,
                       std::size_t bytes) override;

  // The message so far, as slices that share the data memory. Call once,
  // after the last AllocateTensor; writing the data may go on until the
  // buffer is sent.
  grpc::ByteBuffer TakeBuffer();

 private:
  uint64_t request_id_ = 0;
  bool request_id_written_ = false;
  std::string pending_;  // encoded bytes not yet in a slice
  std::vector<grpc::Slice> slices_;
  void WriteRequestIdOnce();
};

// Writes to `reply` the NormalizeStreamResponse that carries `response` (a
// NormalizeResponse as TakeBuffer encodes it) for `request_id`, encoded as
// protobuf's serializer would encode it: request_id (field 1, when not 0),
// then the response as field 2. The response's slices are shared, not
// copied. False (and `reply` untouched) when the response's slices cannot
// be read.
bool WrapStreamResponse(uint64_t request_id, const grpc::ByteBuffer& response,
                        grpc::ByteBuffer* reply);

}  // namespace normsvc::server
