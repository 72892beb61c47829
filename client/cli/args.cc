#include "args.h"

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace normsvc::cli {

absl::StatusOr<Args> Args::Parse(int argc, char** argv, int first,
                                 const std::set<std::string>& boolean_flags) {
  Args args;
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      args.positional_.push_back(arg);
      continue;
    }
    const size_t equals = arg.find('=');
    std::string name = arg.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
    std::string value;
    if (equals != std::string::npos) {
      value = arg.substr(equals + 1);
    } else if (boolean_flags.count(name) > 0) {
      value = "true";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
    }
    if (args.values_.count(name) > 0) {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " given twice"));
    }
    args.values_[name] = value;
  }
  return args;
}

std::string Args::GetString(const std::string& name, const std::string& fallback) {
  std::optional<std::string> value = GetOptional(name);
  return value ? *value : fallback;
}

std::optional<std::string> Args::GetOptional(const std::string& name) {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  used_.insert(name);
  return it->second;
}

absl::StatusOr<int64_t> Args::GetInt(const std::string& name, int64_t fallback) {
  std::optional<std::string> text = GetOptional(name);
  if (!text) return fallback;
  int64_t value = 0;
  if (!absl::SimpleAtoi(*text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " wants an integer, got '", *text, "'"));
  }
  return value;
}

absl::StatusOr<double> Args::GetDouble(const std::string& name, double fallback) {
  std::optional<std::string> text = GetOptional(name);
  if (!text) return fallback;
  double value = 0;
  if (!absl::SimpleAtod(*text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " wants a number, got '", *text, "'"));
  }
  return value;
}

absl::StatusOr<bool> Args::GetBool(const std::string& name, bool fallback) {
  std::optional<std::string> text = GetOptional(name);
  if (!text) return fallback;
  bool value = false;
  if (!absl::SimpleAtob(*text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " wants true or false, got '", *text, "'"));
  }
  return value;
}

absl::Status Args::CheckAllUsed() const {
  std::vector<std::string> unused;
  for (const auto& [name, value] : values_) {
    if (used_.count(name) == 0) unused.push_back("--" + name);
  }
  if (unused.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("unknown flag(s) ", absl::StrJoin(unused, ", ")));
}

}  // namespace normsvc::cli
