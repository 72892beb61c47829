// What this binary was built from, for --version, GetServerInfo and the
// build-info metric.
#pragma once

namespace normsvc::server {

// The commit the sources were at when this binary was built (12 hex digits,
// "-dirty" when tracked files differed from it; "unknown" outside a git
// checkout). Defined in a file the build writes (server/git_commit.cmake).
const char* GitCommit();

}  // namespace normsvc::server
