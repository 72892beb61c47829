#include "server/thread_name.h"

#include <pthread.h>

#include <string>

namespace normsvc::server {

void NameCurrentThread(std::string_view name) {
#if defined(__linux__)
  constexpr std::size_t kMaxNameBytes = 15;  // TASK_COMM_LEN less the terminator
  const std::string truncated(name.substr(0, kMaxNameBytes));
  pthread_setname_np(pthread_self(), truncated.c_str());  // a refusal leaves the old name
#else
  (void)name;
#endif
}

}  // namespace normsvc::server
