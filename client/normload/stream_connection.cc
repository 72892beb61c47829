#include "load_slot.h"

namespace normsvc::normload {

void StreamConnection::OnReadDone(bool ok) {
  if (!ok) return;
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
