#include "server/secret_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace normsvc::server {

absl::StatusOr<std::string> ReadFlagFile(const std::string& flag, const std::string& path,
                                         int64_t max_bytes) {
  auto failure = [&](const std::string& reason) {
    return absl::FailedPreconditionError(
        absl::StrCat("--", flag, ": cannot read '", path, "': ", reason));
  };
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return failure(std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { close(fd); }
  } closer{fd};
  struct stat info {};
  if (fstat(fd, &info) != 0) return failure(std::strerror(errno));
  if (S_ISDIR(info.st_mode)) return failure("is a directory");
  std::string contents;
  char buffer[8192];
  while (true) {
    const ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got < 0) {
      if (errno == EINTR) continue;
      return failure(std::strerror(errno));
    }
    if (got == 0) break;
    contents.append(buffer, static_cast<size_t>(got));
    if (static_cast<int64_t>(contents.size()) > max_bytes) {
      return failure(absl::StrCat("larger than ", max_bytes, " bytes"));
    }
  }
  return contents;
}

}  // namespace normsvc::server
