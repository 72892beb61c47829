// The models normsvc offers on the open inference protocol (KServe v2):
//   layernorm, rmsnorm            INPUT [-1, -1] plus optional GAMMA/BETA [-1]
//   layernorm.<set>, rmsnorm.<set> a registered parameter set: INPUT [-1, H]
// Every model has the one version "1". This file resolves names and
// describes models (metadata, configuration); it knows nothing of calls.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_service.pb.h"
#include "normsvc/kernels/types.h"
#include "server/parameter_store.h"

namespace normsvc::server {

inline constexpr char kKserveModelVersion[] = "1";
inline constexpr char kKserveInput[] = "INPUT";
inline constexpr char kKserveGamma[] = "GAMMA";
inline constexpr char kKserveBeta[] = "BETA";
inline constexpr char kKserveOutput[] = "OUTPUT";

struct KserveModel {
  std::string name;
  kernels::NormOp op = kernels::NormOp::kLayerNorm;
  // Null for the plain models; the set behind `<op>.<set>` otherwise.
  std::shared_ptr<const ParameterSet> parameters;
};

// NOT_FOUND for an unknown model (or set), and for a version other than
// "" or "1". RMSNorm over a set with beta is FAILED_PRECONDITION.
absl::StatusOr<KserveModel> ResolveKserveModel(absl::string_view name, absl::string_view version,
                                               const ParameterStore& store);

// Every model now served: the two plain ones, then one per op and set.
std::vector<KserveModel> ListKserveModels(const ParameterStore& store);

// Protocol datatype names ("FP32", "FP16", "BF16") of the supported dtypes.
const char* KserveDatatypeName(kernels::DType dtype);
std::optional<kernels::DType> KserveDatatypeFromName(absl::string_view name);

void DescribeKserveModel(const KserveModel& model, inference::ModelMetadataResponse* metadata);
void ConfigureKserveModel(const KserveModel& model, inference::ModelConfig* config);

}  // namespace normsvc::server
