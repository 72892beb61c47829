// Messages of the raw (bytes in, bytes out) methods. gRPC's typed callback
// handlers answer a request that does not parse with UNIMPLEMENTED and no
// message, before any handler of ours runs, and its typed streams report
// one as the end of the stream. So every method of the Normalizer service
// and the KServe inference methods take the received bytes and parse them
// here, where a malformed message becomes INVALID_ARGUMENT naming its type.
#pragma once

#include <string>

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace normsvc::server {

// Parses `bytes` (consumed) into `message`, replacing what it held. When
// they do not parse, `message` is cleared (nothing half-parsed is echoed)
// and the status names the expected message type.
template <typename Message>
absl::Status ParseMessageBytes(grpc::ByteBuffer* bytes, Message* message) {
  message->Clear();
  if (grpc::SerializationTraits<Message>::Deserialize(bytes, message).ok()) {
    return absl::OkStatus();
  }
  message->Clear();
  return absl::InvalidArgumentError(
      absl::StrCat("the message is not a valid ", message->GetTypeName()));
}

// Serializes `message` into `bytes`, which gRPC then sends. False only for
// a message protobuf cannot serialize (over 2 GiB).
template <typename Message>
bool SerializeMessageBytes(const Message& message, grpc::ByteBuffer* bytes) {
  bool own_buffer = false;
  bytes->Clear();
  return grpc::SerializationTraits<Message>::Serialize(message, bytes, &own_buffer).ok();
}

}  // namespace normsvc::server
