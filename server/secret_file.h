// Reading the small files that flags name (certificates, keys, tokens) with
// errors that name the flag and the file, for clear start-up failures.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace normsvc::server {

// The whole file at `path`, which --`flag` names. FAILED_PRECONDITION
// "--flag: cannot read 'path': <reason>" when it is missing, unreadable, a
// directory, or larger than `max_bytes` (these files are small; a huge one
// is the wrong file).
absl::StatusOr<std::string> ReadFlagFile(const std::string& flag, const std::string& path,
                                         int64_t max_bytes = int64_t{1} << 20);

}  // namespace normsvc::server
