// Command-line flags of normctl and normload: "--name=value", "--name value",
// and boolean "--name" (also "--name=true|false"). Every flag must be read
// by the command; Unused() names the ones it did not read (typos).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace normsvc::cli {

class Args {
 public:
  // Parses argv[first..argc). `boolean_flags` take no separate value.
  static absl::StatusOr<Args> Parse(int argc, char** argv, int first,
                                    const std::set<std::string>& boolean_flags);

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string GetString(const std::string& name, const std::string& fallback = "");
  std::optional<std::string> GetOptional(const std::string& name);
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback);
  absl::StatusOr<double> GetDouble(const std::string& name, double fallback);
  absl::StatusOr<bool> GetBool(const std::string& name, bool fallback);
  const std::vector<std::string>& positional() const { return positional_; }

  // An error naming every flag given but never read, or OK.
  absl::Status CheckAllUsed() const;

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> used_;
  std::vector<std::string> positional_;
};

}  // namespace normsvc::cli
