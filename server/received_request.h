// A unary Normalize request parsed from the bytes gRPC received, without
// copying its tensors. protobuf's parser would copy each tensor's data into
// a string of its own (a copy of every request byte and an allocation per
// tensor, about a tenth of the server's CPU at 1x4096 with inline
// parameters: server/README.md); here the data stays in gRPC's buffers,
// which the request holds, and executors copy it from there once, into
// their staging memory.
#pragma once

#include <vector>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include "absl/status/status.h"
#include "normsvc/v1/normalizer.pb.h"
#include "server/received_bytes.h"
#include "server/validation.h"

namespace normsvc::server {

struct ReceivedNormalizeRequest {
  ReceivedNormalizeRequest() = default;
  // Not copyable: the pieces may point into `buffers`' own slice objects
  // (gRPC keeps a few bytes inline in the slice), which a copy would not
  // own.
  ReceivedNormalizeRequest(const ReceivedNormalizeRequest&) = delete;
  ReceivedNormalizeRequest& operator=(const ReceivedNormalizeRequest&) = delete;

  // Every field of the request except the data of input, residual and
  // parameters.inline.{gamma,beta}, which are empty here: the rest below.
  v1::NormalizeRequest message;
  ReceivedBytes input, residual, gamma, beta;
  // gRPC's buffers that the pieces point into.
  std::vector<grpc::Slice> buffers;

  ReceivedTensorData tensor_data() const { return {&input, &residual, &gamma, &beta}; }
};

// Parses `bytes` and takes them over (`bytes` is left empty, as gRPC's
// typed methods leave it after parsing). Gives the message protobuf's parser
// (3.21) gives for the same bytes, field for field (the four tensors' data
// aside), unknown fields included, and INVALID_ARGUMENT where it fails: on
// malformed bytes, and on messages and groups nested more than 100 deep.
absl::Status ParseReceivedNormalizeRequest(grpc::ByteBuffer* bytes,
                                           ReceivedNormalizeRequest* request);

}  // namespace normsvc::server
