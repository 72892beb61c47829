// Unary Normalize, NormalizeBackward and RegisterParameters requests parsed
// from the bytes gRPC received, without copying their tensors. protobuf's parser would copy each
// tensor's data into a string of its own (a copy of every request byte and an allocation per
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

// gRPC's receive buffers that a parsed request's pieces point into. They
// are let go through a grpc::ByteBuffer, whose destruction gives gRPC the
// execution context in which it returns receive memory to its memory quota:
// in gRPC 1.51 a bare slice release on an application thread has none, and
// crashes the process when the release wakes gRPC's memory reclaimer
// (server/README.md).
class ReceivedBuffers {
 public:
  ReceivedBuffers() = default;
  ~ReceivedBuffers() { Clear(); }
  ReceivedBuffers(const ReceivedBuffers&) = delete;
  ReceivedBuffers& operator=(const ReceivedBuffers&) = delete;

  // Takes `bytes` over (leaving it empty); false where its slices cannot be
  // read.
  bool Take(grpc::ByteBuffer* bytes);
  const std::vector<grpc::Slice>& slices() const { return slices_; }
  bool empty() const { return slices_.empty() && !held_.Valid(); }
  // The slices' own references go first, so that held_ drops the last ones.
  void Clear() {
    slices_.clear();
    held_.Clear();
  }

 private:
  grpc::ByteBuffer held_;
  std::vector<grpc::Slice> slices_;  // references to held_'s slices
};

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
  ReceivedBuffers buffers;

  ReceivedTensorData tensor_data() const { return {&input, &residual, &gamma, &beta}; }
};

// Parses `bytes` and takes them over (`bytes` is left empty, as gRPC's
// typed methods leave it after parsing). Gives the message protobuf's parser
// (3.21) gives for the same bytes, field for field (the four tensors' data
// aside), unknown fields included, and INVALID_ARGUMENT where it fails: on
// malformed bytes, and on messages and groups nested more than 100 deep.
absl::Status ParseReceivedNormalizeRequest(grpc::ByteBuffer* bytes,
                                           ReceivedNormalizeRequest* request);

// A NormalizeBackward request parsed the same way, so that it is validated
// before its tensors are copied anywhere: the backward kernels read x, dy,
// the statistics and gamma in one piece each, so once the request is valid
// CopyDataIntoMessage puts the data into the message (the one copy
// protobuf's parser would have made, now after validation) and lets gRPC's
// buffers go.
struct ReceivedBackwardRequest {
  ReceivedBackwardRequest() = default;
  ReceivedBackwardRequest(const ReceivedBackwardRequest&) = delete;  // as above
  ReceivedBackwardRequest& operator=(const ReceivedBackwardRequest&) = delete;

  // Copies each present tensor's received data into its data field and
  // releases the pieces and `buffers`.
  void CopyDataIntoMessage();

  // Every field but the data of input, grad_output, mean, rstd and
  // parameters.inline.{gamma,beta} (beta is parsed, and ignored, as
  // protobuf's parser keeps it).
  v1::NormalizeBackwardRequest message;
  ReceivedBytes input, grad_output, mean, rstd, gamma, beta;
  ReceivedBuffers buffers;

  ReceivedBackwardData tensor_data() const { return {&input, &grad_output, &mean, &rstd, &gamma}; }
};

// As ParseReceivedNormalizeRequest, for a NormalizeBackwardRequest.
absl::Status ParseReceivedBackwardRequest(grpc::ByteBuffer* bytes,
                                          ReceivedBackwardRequest* request);

// A RegisterParametersRequest parsed the same way, for the same reason:
// validated before gamma and beta are copied (the store copies them again
// into the set).
struct ReceivedRegisterRequest {
  ReceivedRegisterRequest() = default;
  ReceivedRegisterRequest(const ReceivedRegisterRequest&) = delete;  // as above
  ReceivedRegisterRequest& operator=(const ReceivedRegisterRequest&) = delete;

  void CopyDataIntoMessage();  // as ReceivedBackwardRequest's

  v1::RegisterParametersRequest message;  // gamma's and beta's data: below
  ReceivedBytes gamma, beta;
  ReceivedBuffers buffers;

  ReceivedRegisterData tensor_data() const { return {&gamma, &beta}; }
};

// As ParseReceivedNormalizeRequest, for a RegisterParametersRequest.
absl::Status ParseReceivedRegisterRequest(grpc::ByteBuffer* bytes,
                                          ReceivedRegisterRequest* request);

}  // namespace normsvc::server
