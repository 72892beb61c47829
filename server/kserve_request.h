// The protocol mapping of one inference: a ModelInferRequest becomes the
// NormalizeRequest the normsvc.v1 path validates and batches (so both
// protocols share edge validation, Task building and the batcher), and a
// NormalizeResponse becomes the ModelInferResponse.
//
// Inputs: INPUT (required, FP32/FP16/BF16, shape [rows..., H]); GAMMA and
// BETA (optional, shape [H], plain models only). Data comes from
// raw_input_contents (one entry per input, in input order) or, for FP32,
// from contents.fp32_contents. Request parameter `epsilon` (double, int64 or
// string). Outputs: OUTPUT only, returned in raw_output_contents.
#pragma once

#include "absl/status/status.h"
#include "inference/grpc_service.pb.h"
#include "normsvc/v1/normalizer.pb.h"
#include "server/kserve_models.h"
#include "server/validation.h"

namespace normsvc::server {

// INVALID_ARGUMENT names the offending input, parameter or output. The
// raw_input_contents are moved into `out`, not copied (a request is held
// once, not twice): `in` keeps its inputs' names, shapes and datatypes, and
// its raw_input_contents entries are left empty.
absl::Status ToNormalizeRequest(const KserveModel& model, inference::ModelInferRequest& in,
                                v1::NormalizeRequest* out);

// An edge-validation error of the translated request in the protocol's
// terms: normsvc.v1 field names become tensor names (input -> INPUT,
// parameters.inline.gamma -> GAMMA, ...), prefixed with the model's name.
// The code is kept.
absl::Status ToKserveError(const KserveModel& model, const absl::Status& status);

// Moves the output bytes (no copy) and fills names, shape and datatype.
void ToModelInferResponse(const KserveModel& model, const inference::ModelInferRequest& request,
                          v1::NormalizeResponse* result, inference::ModelInferResponse* out);

}  // namespace normsvc::server
