// NormalizeStream: many requests over one bidirectional stream.
//
// Reads run ahead of replies: each request is validated and scheduled as it
// arrives, and its reply is written when its task finishes, so replies come
// in completion order, each carrying its request_id. At most
// max_stream_in_flight requests may be read and not yet written back; past
// that the stream stops reading, and HTTP/2 flow control pushes back on
// the client. A per-request error is an Error message; the stream goes on.
// The stream finishes (OK) after the client half-closes and every reply is
// written; on server drain it stops reading and finishes (UNAVAILABLE)
// once its accepted requests are answered.
#pragma once

#include <grpcpp/support/server_callback.h>

#include "normsvc/v1/normalizer.pb.h"
#include "server/service_context.h"

namespace grpc {
class CallbackServerContext;
}

namespace normsvc::server {

grpc::ServerBidiReactor<v1::NormalizeRequest, v1::NormalizeStreamResponse>* StartNormalizeStream(
    ServiceContext& service, grpc::CallbackServerContext* context);

}  // namespace normsvc::server
