#include "process_tuning.h"

#include <malloc.h>

#include "absl/synchronization/mutex.h"

namespace normsvc::cli {

void TuneProcessForLoad() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 16 << 20);
}

}  // namespace normsvc::cli
