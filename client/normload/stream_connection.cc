#include "load_slot.h"

namespace normsvc::normload {

void StreamConnection::OnReadDone(bool ok) {
  if (!ok) {
    // The call has ended (the server finished it, or it was cancelled or
    // broken): no write may start any more, and OnDone must not wait for one.
    bool release = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      broken_ = true;
      if (!writing_) release = ReleaseHoldLocked();  // a write in flight releases it
    }
    if (release) RemoveHold();
    return;
  }
  sink_->OnStreamResponse(response_);
  StartRead(&response_);
}

void StreamConnection::OnDone(const grpc::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  sink_->OnStreamEnded(this, status);
  std::lock_guard<std::mutex> lock(mutex_);
  done_cv_.notify_all();
}

}  // namespace normsvc::normload
