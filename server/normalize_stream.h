// NormalizeStream: many requests over one bidirectional stream.
//
// Reads run ahead of replies: each request is validated and scheduled as it
// arrives, and its reply is written when its task finishes, so replies come
// in completion order, each carrying its request_id. At most
// max_stream_in_flight requests may be read and not yet written back, and
// the stream's requests and unwritten replies hold at most about a quarter
// of --max_queued_bytes (ServiceContext::max_stream_bytes); past either the
// stream stops reading, and HTTP/2 flow control pushes back on the client. A per-request error is
// an Error message; the stream goes on. The stream finishes (OK) after the client half-closes and
// every reply is written; on server drain it stops reading and finishes (UNAVAILABLE) once its
// accepted requests are answered. A message that does not parse as a NormalizeRequest has no
// request_id to answer it by: the stream stops reading there and finishes INVALID_ARGUMENT, naming
// the message's place in the stream, once the requests before it are answered.
//
// The method is raw (bytes in and out): gRPC's own parsing would report a
// malformed message as the end of the stream. Each message is parsed as
// Normalize's are (received_request.h): its tensors' data stays in gRPC's
// buffers until the executor copies it into staging. A result is encoded
// by hand into the slices that are sent (wire_response.h, as Normalize's),
// so the executor writes each result tensor straight into them. A request's
// bytes are freed as soon as its task is done; its reply is kept, encoded,
// until written, and holds that much of --max_queued_bytes.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include "normsvc/v1/normalizer.pb.h"
#include "server/service_context.h"

namespace grpc {
class CallbackServerContext;
}

namespace normsvc::server {

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartNormalizeStream(
    ServiceContext& service, grpc::CallbackServerContext* context);

}  // namespace normsvc::server
