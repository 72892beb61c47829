#include "workload.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "normsvc/client/tensor.h"

namespace normsvc::normload {
namespace {

absl::Status BadValue(const std::string& key, const std::string& value) {
  return absl::InvalidArgumentError(absl::StrCat("bad value '", value, "' for '", key, "'"));
}

absl::StatusOr<bool> ParseFlag(const std::string& key, const std::string& value) {
  if (value == "1" || value == "true" || value == "yes") return true;
  if (value == "0" || value == "false" || value == "no") return false;
  return BadValue(key, value);
}

}  // namespace

std::string DescribeKind(const RequestKind& kind) {
  const char* params = kind.params == ParamsMode::kNone     ? "none"
                       : kind.params == ParamsMode::kInline ? "inline"
                                                            : "registered";
  return absl::StrCat(
      "method=", kind.method == Method::kForward ? "forward" : "backward",
      ",op=", std::string(client::NormOpName(kind.op)),
      ",dtype=", std::string(client::DTypeName(kind.dtype)), ",rows=", kind.rows,
      ",hidden=", kind.hidden, ",params=", params, ",param_dtype=",
      kind.param_dtype == v1::DTYPE_UNSPECIFIED ? "same"
                                                : std::string(client::DTypeName(kind.param_dtype)),
      ",residual=", kind.residual ? 1 : 0, ",stats=", kind.statistics ? 1 : 0, ",out_dtype=",
      std::string(
          client::DTypeName(kind.out_dtype == v1::DTYPE_UNSPECIFIED ? kind.dtype : kind.out_dtype)),
      ",eps=", kind.epsilon,
      ",transport=", kind.transport == Transport::kUnary ? "unary" : "stream",
      ",weight=", kind.weight);
}

absl::StatusOr<RequestKind> ParseKind(const std::string& text) {
  RequestKind kind;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::vector<std::string> parts = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("expected key=value, got '", item, "'"));
    }
    const std::string key(absl::StripAsciiWhitespace(parts[0]));
    const std::string value(absl::StripAsciiWhitespace(parts[1]));
    if (key == "method") {
      if (value == "forward") {
        kind.method = Method::kForward;
      } else if (value == "backward") {
        kind.method = Method::kBackward;
      } else {
        return BadValue(key, value);
      }
    } else if (key == "op") {
      std::optional<v1::NormOp> op = client::ParseNormOp(value);
      if (!op) return BadValue(key, value);
      kind.op = *op;
    } else if (key == "dtype" || key == "out_dtype" || key == "param_dtype") {
      std::optional<v1::DType> dtype = client::ParseDType(value);
      if (key == "param_dtype" && value == "same") dtype = v1::DTYPE_UNSPECIFIED;
      if (!dtype) return BadValue(key, value);
      (key == "dtype"       ? kind.dtype
       : key == "out_dtype" ? kind.out_dtype
                            : kind.param_dtype) = *dtype;
    } else if (key == "rows" || key == "hidden") {
      int64_t number = 0;
      if (!absl::SimpleAtoi(value, &number) || number < 1 || number > (int64_t{1} << 24)) {
        return BadValue(key, value);
      }
      (key == "rows" ? kind.rows : kind.hidden) = number;
    } else if (key == "params") {
      if (value == "none") {
        kind.params = ParamsMode::kNone;
      } else if (value == "inline") {
        kind.params = ParamsMode::kInline;
      } else if (value == "registered") {
        kind.params = ParamsMode::kRegistered;
      } else {
        return BadValue(key, value);
      }
    } else if (key == "residual" || key == "stats") {
      absl::StatusOr<bool> flag = ParseFlag(key, value);
      if (!flag.ok()) return flag.status();
      (key == "residual" ? kind.residual : kind.statistics) = *flag;
    } else if (key == "eps") {
      if (!absl::SimpleAtof(value, &kind.epsilon) || !(kind.epsilon > 0))
        return BadValue(key, value);
    } else if (key == "transport") {
      if (value == "unary") {
        kind.transport = Transport::kUnary;
      } else if (value == "stream") {
        kind.transport = Transport::kStream;
      } else {
        return BadValue(key, value);
      }
    } else if (key == "weight") {
      if (!absl::SimpleAtod(value, &kind.weight) || !(kind.weight > 0)) return BadValue(key, value);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown mix key '", key, "'"));
    }
  }
  if (kind.rows * kind.hidden > (int64_t{1} << 28)) {
    return absl::InvalidArgumentError("rows x hidden above 2^28 elements");
  }
  if (kind.method == Method::kBackward) {
    if (kind.transport == Transport::kStream) {
      return absl::InvalidArgumentError("backward has no streaming form");
    }
    if (kind.residual || kind.statistics || kind.out_dtype != v1::DTYPE_UNSPECIFIED) {
      return absl::InvalidArgumentError("residual, stats and out_dtype are forward options");
    }
  }
  return kind;
}

absl::StatusOr<std::vector<RequestKind>> ParseMix(const std::string& text) {
  std::vector<RequestKind> kinds;
  for (absl::string_view part : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    absl::StatusOr<RequestKind> kind = ParseKind(std::string(part));
    if (!kind.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("mix '", part, "': ", kind.status().message()));
    }
    kinds.push_back(*kind);
  }
  if (kinds.empty()) return absl::InvalidArgumentError("empty mix");
  return kinds;
}

absl::StatusOr<std::vector<RequestKind>> ReadScenarioFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open scenario file '", path, "'"));
  std::vector<RequestKind> kinds;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    line = line.substr(0, line.find('#'));
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    absl::StatusOr<RequestKind> kind = ParseKind(line);
    if (!kind.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", number, ": ", kind.status().message()));
    }
    kinds.push_back(*kind);
  }
  if (kinds.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no request kinds"));
  return kinds;
}

}  // namespace normsvc::normload
