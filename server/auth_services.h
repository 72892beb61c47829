// The two services of the gRPC port behind the bearer-token check. Each
// wrapper is what gRPC registers when --auth_token_file is set: every RPC
// checks the token first, inline on the gRPC thread (no blocking), and
// either answers UNAUTHENTICATED at once or hands the call, unchanged, to
// the inner service's handler. grpc.health.v1 and reflection are not
// wrapped: probes and tools reach them without a token.
//
// A call refused here never reaches the inner service: it is not validated,
// queued or drained. It is counted once in normsvc_requests_total under its
// method with code="UNAUTHENTICATED" (op and dtype "none": the request was
// not read; a refused stream counts once).
//
// Every RPC of both services is overridden below; a test calls each method
// of the service descriptors without a token, so an RPC added to a proto
// but not here fails that test rather than going unprotected.
#pragma once

#include <grpcpp/support/server_callback.h>

#include "inference/grpc_service.grpc.pb.h"
#include "normsvc/v1/normalizer.grpc.pb.h"
#include "server/auth.h"
#include "server/kserve_service.h"
#include "server/metrics.h"
#include "server/service.h"

namespace normsvc::server {

class NormalizerService;

// The check and the refusal, shared by both wrappers.
class CallGuard {
 public:
  CallGuard(BearerTokenAuth auth, ServiceMetrics& metrics)
      : auth_(std::move(auth)), metrics_(metrics) {}

  // nullptr when the call carries the token. Otherwise a reactor already
  // finishing with UNAUTHENTICATED, to return from the handler; the refusal
  // is counted under `method`.
  grpc::ServerUnaryReactor* RefuseUnary(grpc::CallbackServerContext* context, Method method);
  // The same for a bidirectional stream: the reactor finishes the stream
  // before reading anything and deletes itself when gRPC is done with it.
  template <typename Request, typename Response>
  grpc::ServerBidiReactor<Request, Response>* RefuseStream(grpc::CallbackServerContext* context,
                                                           Method method);

 private:
  // OK, or the refusal (counted).
  absl::Status Check(grpc::CallbackServerContext* context, Method method);

  const BearerTokenAuth auth_;
  ServiceMetrics& metrics_;
};

class AuthenticatedNormalizer final : public NormalizerCallbackBase {
 public:
  AuthenticatedNormalizer(NormalizerService& inner, CallGuard& guard)
      : inner_(inner), guard_(guard) {}

  NORMSVC_NORMALIZER_RAW_METHODS

 private:
  NormalizerService& inner_;
  CallGuard& guard_;
};

class AuthenticatedKserve final : public KserveCallbackBase {
 public:
  AuthenticatedKserve(KserveService& inner, CallGuard& guard) : inner_(inner), guard_(guard) {}

  NORMSVC_KSERVE_METHODS

 private:
  KserveService& inner_;
  CallGuard& guard_;
};

}  // namespace normsvc::server
