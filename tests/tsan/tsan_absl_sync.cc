// ThreadSanitizer annotations for absl::Mutex and absl::CondVar; only in the
// tsan build (see tsan_absl_sync.cmake).
//
// This library defines the Abseil entry points itself (by their mangled
// names, passed in as NORMSVC_* definitions) and is linked ahead of Abseil,
// so the dynamic linker binds every call from normsvc, gRPC and Abseil's
// other libraries to these definitions. Each one tells ThreadSanitizer what
// the call does to the mutex, the way its own pthread interceptors do, and
// then calls Abseil's function, found with dlsym(RTLD_NEXT).
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#define NORMSVC_EXPORT __attribute__((visibility("default")))

using absl::CondVar;
using absl::Mutex;

namespace {

// Abseil's definition of `symbol`, looked up once.
template <typename Function>
Function Real(const char* symbol, std::atomic<Function>& cache) {
  Function function = cache.load(std::memory_order_acquire);
  if (function == nullptr) {
    function = reinterpret_cast<Function>(dlsym(RTLD_NEXT, symbol));
    if (function == nullptr) {
      std::fprintf(stderr, "tsan_absl_sync: %s not found\n", symbol);
      std::abort();
    }
    cache.store(function, std::memory_order_release);
  }
  return function;
}

#define NORMSVC_REAL(type, symbol)           \
  ([]() -> type {                            \
    static std::atomic<type> cache{nullptr}; \
    return Real<type>(symbol, cache);        \
  }())

using MutexFunction = void (*)(Mutex*);
using TryLockFunction = bool (*)(Mutex*);
using WaitFunction = void (*)(CondVar*, Mutex*);
using WaitWithDeadlineFunction = bool (*)(CondVar*, Mutex*, absl::Time);
using WaitWithTimeoutFunction = bool (*)(CondVar*, Mutex*, absl::Duration);

// Abseil implements some entry points with others (WaitWithTimeout calls
// WaitWithDeadline through the same interposed symbol): only the outermost
// call on a thread is reported.
thread_local int nesting = 0;

class Outermost {
 public:
  Outermost() : outermost_(nesting++ == 0) {}
  ~Outermost() { --nesting; }
  explicit operator bool() const { return outermost_; }

 private:
  const bool outermost_;
};

// A wait releases the (writer-held) mutex and holds it again on return.
void BeforeWait(const Outermost& outermost, Mutex* mu) {
  if (!outermost) return;
  __tsan_mutex_pre_unlock(mu, 0);
  __tsan_mutex_post_unlock(mu, 0);
}
void AfterWait(const Outermost& outermost, Mutex* mu) {
  if (!outermost) return;
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
}

}  // namespace

// The interposed definitions, known to the linker by Abseil's names only.
NORMSVC_EXPORT void InterposedLock(Mutex* mu) __asm__(NORMSVC_MUTEX_LOCK);
NORMSVC_EXPORT void InterposedUnlock(Mutex* mu) __asm__(NORMSVC_MUTEX_UNLOCK);
NORMSVC_EXPORT bool InterposedTryLock(Mutex* mu) __asm__(NORMSVC_MUTEX_TRY_LOCK);
NORMSVC_EXPORT void InterposedReaderLock(Mutex* mu) __asm__(NORMSVC_MUTEX_READER_LOCK);
NORMSVC_EXPORT void InterposedReaderUnlock(Mutex* mu) __asm__(NORMSVC_MUTEX_READER_UNLOCK);
NORMSVC_EXPORT void InterposedWait(CondVar* cv, Mutex* mu) __asm__(NORMSVC_CONDVAR_WAIT);
NORMSVC_EXPORT bool InterposedWaitWithDeadline(CondVar* cv, Mutex* mu, absl::Time deadline) __asm__(
    NORMSVC_CONDVAR_WAIT_WITH_DEADLINE);
NORMSVC_EXPORT bool InterposedWaitWithTimeout(
    CondVar* cv, Mutex* mu, absl::Duration timeout) __asm__(NORMSVC_CONDVAR_WAIT_WITH_TIMEOUT);

void InterposedLock(Mutex* mu) {
  const Outermost outermost;
  if (outermost) __tsan_mutex_pre_lock(mu, 0);
  NORMSVC_REAL(MutexFunction, NORMSVC_MUTEX_LOCK)(mu);
  if (outermost) __tsan_mutex_post_lock(mu, 0, 0);
}

void InterposedUnlock(Mutex* mu) {
  const Outermost outermost;
  if (outermost) __tsan_mutex_pre_unlock(mu, 0);
  NORMSVC_REAL(MutexFunction, NORMSVC_MUTEX_UNLOCK)(mu);
  if (outermost) __tsan_mutex_post_unlock(mu, 0);
}

bool InterposedTryLock(Mutex* mu) {
  const Outermost outermost;
  if (outermost) __tsan_mutex_pre_lock(mu, __tsan_mutex_try_lock);
  const bool locked = NORMSVC_REAL(TryLockFunction, NORMSVC_MUTEX_TRY_LOCK)(mu);
  if (outermost) {
    __tsan_mutex_post_lock(mu, locked ? __tsan_mutex_try_lock : __tsan_mutex_try_lock_failed, 0);
  }
  return locked;
}

void InterposedReaderLock(Mutex* mu) {
  const Outermost outermost;
  if (outermost) __tsan_mutex_pre_lock(mu, __tsan_mutex_read_lock);
  NORMSVC_REAL(MutexFunction, NORMSVC_MUTEX_READER_LOCK)(mu);
  if (outermost) __tsan_mutex_post_lock(mu, __tsan_mutex_read_lock, 0);
}

void InterposedReaderUnlock(Mutex* mu) {
  const Outermost outermost;
  if (outermost) __tsan_mutex_pre_unlock(mu, __tsan_mutex_read_lock);
  NORMSVC_REAL(MutexFunction, NORMSVC_MUTEX_READER_UNLOCK)(mu);
  if (outermost) __tsan_mutex_post_unlock(mu, __tsan_mutex_read_lock);
}

void InterposedWait(CondVar* cv, Mutex* mu) {
  const Outermost outermost;
  BeforeWait(outermost, mu);
  NORMSVC_REAL(WaitFunction, NORMSVC_CONDVAR_WAIT)(cv, mu);
  AfterWait(outermost, mu);
}

bool InterposedWaitWithDeadline(CondVar* cv, Mutex* mu, absl::Time deadline) {
  const Outermost outermost;
  BeforeWait(outermost, mu);
  const bool timed_out =
      NORMSVC_REAL(WaitWithDeadlineFunction, NORMSVC_CONDVAR_WAIT_WITH_DEADLINE)(cv, mu, deadline);
  AfterWait(outermost, mu);
  return timed_out;
}

bool InterposedWaitWithTimeout(CondVar* cv, Mutex* mu, absl::Duration timeout) {
  const Outermost outermost;
  BeforeWait(outermost, mu);
  const bool timed_out =
      NORMSVC_REAL(WaitWithTimeoutFunction, NORMSVC_CONDVAR_WAIT_WITH_TIMEOUT)(cv, mu, timeout);
  AfterWait(outermost, mu);
  return timed_out;
}
