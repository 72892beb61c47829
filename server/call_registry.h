// Open streaming calls of one kind, so a drain can reach idle ones and the
// server's stop can wait until the last one is gone.
//
// A call adds itself once and removes itself from OnDone; after Remove
// returns it touches nothing the server owns.
#pragma once

#include <cstddef>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace normsvc::server {

// A streaming call the server's drain can reach.
class DrainableCall {
 public:
  // Stop reading and finish once idle. Must not block or delete the call
  // (gRPC runs OnDone, where the call removes itself, later on another
  // thread).
  virtual void OnServerDrain() = 0;

 protected:
  ~DrainableCall() = default;
};

class CallRegistry {
 public:
  // A call added after DrainAll is told to drain at once.
  void Add(DrainableCall* call) {
    absl::MutexLock lock(&mutex_);
    calls_.insert(call);
    if (draining_) call->OnServerDrain();
  }

  void Remove(DrainableCall* call) {
    absl::MutexLock lock(&mutex_);
    calls_.erase(call);
    if (calls_.empty()) emptied_.SignalAll();
  }

  // Tells every open call (and any added later) to drain. Under the lock,
  // so no call is removed and deleted while it is told.
  void DrainAll() {
    absl::MutexLock lock(&mutex_);
    draining_ = true;
    for (DrainableCall* call : calls_) call->OnServerDrain();
  }

  // Blocks until every call has removed itself or the deadline passes;
  // true when none is left. The server waits here after gRPC's shutdown and
  // before it frees what calls use: gRPC runs OnDone after its shutdown may
  // have returned, and the lock makes each call's last access happen before
  // the free in C++ terms too.
  bool WaitUntilEmpty(absl::Time deadline) {
    absl::MutexLock lock(&mutex_);
    while (!calls_.empty()) {
      if (emptied_.WaitWithDeadline(&mutex_, deadline)) return calls_.empty();
    }
    return true;
  }

  size_t size() {
    absl::MutexLock lock(&mutex_);
    return calls_.size();
  }

 private:
  absl::Mutex mutex_;
  absl::flat_hash_set<DrainableCall*> calls_ ABSL_GUARDED_BY(mutex_);
  bool draining_ ABSL_GUARDED_BY(mutex_) = false;
  // A CondVar rather than Mutex::Await: the ThreadSanitizer build annotates
  // CondVar waits (tests/tsan), not Await's internal unlock.
  absl::CondVar emptied_;
};

}  // namespace normsvc::server
